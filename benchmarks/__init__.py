"""Benchmark suite: run as ``python -m benchmarks run|verify-cost`` from the repo root (see README.md)."""
