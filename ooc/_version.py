"""The package version (pyproject.toml reads it from here: written once)."""

__version__ = "0.1.0"
