"""Root conftest: importing ``harness`` first installs any ``LPH_MUTANT``; the plugin does the rest."""

pytest_plugins = ["harness.pytest_plugin"]
