"""The SkyRL family: token/packed adapter, fused LM-head (hidden-state) adapter, policy loss, stand-ins
for what its policy-loss module imports."""
