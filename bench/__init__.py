"""Speed and memory benchmarks (``nox -s bench``); see bench/README in README.md."""
