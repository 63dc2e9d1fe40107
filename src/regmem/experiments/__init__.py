"""Experiments: reproductions of the seeds' claims and short tours, each printing claim beside result."""
