"""The slime family (THUDM/slime and its forks): adapter, API detection across revisions, stand-ins for
the dependencies its loss module imports."""
