"""Experiments: the fair protocol of `regmem compare` and `regmem suite`, one training run (runs.py), the
reproductions of the papers' figures and tables (repro/), each printing claim beside result, and short tours."""
