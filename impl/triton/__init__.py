"""The Triton backend of the token-level Function (``impl.backend`` imports it lazily).

* ``env``: what the environment says about Triton (installed? interpreter on?); imports no Triton.
* ``kernels``: the two kernels, registered as torch custom ops (imports ``triton``).
* ``launch``: the launches around them, with the TP combination of ``impl.row_stats``.

Importing this package imports none of its modules: ``triton`` is an optional dependency and costs about a
second to import.
"""
