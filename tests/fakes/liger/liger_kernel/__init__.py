"""Stand-in Liger-Kernel package (written here): the three Functions the adapters call, plain torch."""
