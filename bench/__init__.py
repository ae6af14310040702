"""Benchmarks of agentmemory against peer systems (see docs/benchmarks.md); run ``python -m bench.run``."""
