"""Benchmark suite of peanut-py (not installed with the package)."""
