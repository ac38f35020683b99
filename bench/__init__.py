"""Speed and memory benchmarks (``nox -s bench``); docs/usage.md says what each table measures."""
