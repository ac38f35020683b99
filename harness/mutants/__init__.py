"""Historic bugs as named mutants of ``impl/`` (one module per concern, gathered by catalog.py), their loader
and runner."""
