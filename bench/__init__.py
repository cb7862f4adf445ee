"""Benchmarks of the controller against a same-run baseline (``make bench``; see bench/README.md)."""
