"""Historic bugs as named mutants of ``impl/`` (catalog.py), their loader and runner."""
