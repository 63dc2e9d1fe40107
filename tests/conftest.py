import os

import torch
from hypothesis import settings

# Deterministic property tests: CI must not flake, so examples are derived from the test, not from a clock.
settings.register_profile("regmem", deadline=None, derandomize=True, max_examples=25, print_blob=True)
# `make test-thorough`: fresh random examples on every run, eight times as many; a failure prints the blob that
# replays it (@reproduce_failure), and the example database in .hypothesis/ retries it first on the next run.
settings.register_profile("thorough", deadline=None, derandomize=False, max_examples=200, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "regmem"))

# regmem's Triton kernels (backend="triton") run on the CPU under Triton's interpreter. The switch must be on before
# anything imports triton (torch.compile's inductor does): triton decorates its own language helpers at import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Two pytest-xdist workers share two cores: one thread each keeps the suite from oversubscribing.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
