"""The lab: what runs experiments on the library, beside it and never inside it.

- `regmem.lab.experiments`: the fair protocol of `compare` and `suite`, presets and tuned learning rates, runs as
  TOML files, analyses, text generation, the showcase and the papers' reproductions;
- `regmem.lab.bench`: timings of ops, layers, decoding and optimisers (`regmem bench`);
- `regmem.lab.cli`: the `regmem` command.

The library (`ops`, `nested`, `layers`, `models`, `optim`, `train`, `tasks`, `analysis`, `recipe`, `storage`,
`interop`, `hf`) imports nothing from here (tests/test_layering.py); this package imports nothing itself, so
`import regmem.lab` loads no experiment.
"""
