"""The package's version: the one place it is written (pyproject.toml reads it from here).
It is part of every compile-cache key, so code built by another version is never reused."""
VERSION = "0.1.0"
