"""Stand-in ops package."""
