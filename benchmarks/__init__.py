"""Benchmarks: `python -m benchmarks` runs them all; each module also runs alone (`python -m benchmarks.NAME`)."""
