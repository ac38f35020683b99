"""Stand-in (tests only): the miles package marker (the loader never runs an __init__ file)."""
