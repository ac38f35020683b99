"""The slime family and its fork miles: ``family.py`` the records, ``policy.py`` the policy-loss options."""
