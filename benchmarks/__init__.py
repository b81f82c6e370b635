"""cnichain's benchmarks: the only code that measures (see README.md here)."""
