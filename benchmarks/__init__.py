"""Benchmarks: every figure is a ratio against a reference measured in the same process run."""
