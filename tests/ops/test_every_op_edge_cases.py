"""Every op of `regmem.ops.OPS` on the inputs where a form could be silently wrong (issue 44, "nothing silently
wrong"), from the registry of example inputs (`regmem/ops/examples.py`), so an op added later is covered:

  - a NaN in one token reaches the same outputs in every form: the reference, recurrent and chunk forms are NaN at
    the same (b, t, h) positions from that token on, and no form turns a NaN into a number (in the output or the
    final state). Before the token a form may spread the NaN further only where BACKWARD_SPREAD says why;
  - a NaN scale, gate or step size raises the ValueError naming it, as an out-of-range one does;
  - an empty batch (B = 0) or sequence (T = 0) gives empty outputs in every form, and at T = 0 the state it started
    from;
  - the least-squares chunk form pads a short sequence only to its own length, not to a whole chunk.
"""

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from helpers import assert_close, flatten_state
from regmem.ops import OPS, value_checks
from regmem.ops.examples import EXAMPLES

B, H, K, V = 2, 2, 4, 4
FORMS = ("reference", "recurrent", "chunk")
# T = 7 with chunks of C = 4: two chunks, the second one short. K = V keeps softmax_attn's chunk form on SDPA's fused
# kernels, which on the CPU read a row of NaN logits as a fully masked row (0) for T <= 7.
T, C = 7, 4


def _tokens(name: str) -> list[str]:
    tokens, _, _ = EXAMPLES[name].make(1, 1, 1, 2, 2, torch.float64, torch.Generator().manual_seed(0))
    return list(tokens)


def _example(name, T, *, B=B, seed=0):
    tokens, options, state = EXAMPLES[name].make(B, T, H, K, V, torch.float64, torch.Generator().manual_seed(seed))
    return partial(OPS[name], **options), tokens, state


def _call(op, tokens, state, mode):
    chunk = {"chunk_size": C} if mode == "chunk" else {}
    return op(**tokens, initial_state=state, output_final_state=True, mode=mode, **chunk)


# --- NaN propagation ---------------------------------------------------------------------------------------------

# (op, form) -> how far before the NaN token the form's output turns NaN, and why. "chunk": at most C - 1 tokens
# before it (its chunk); "sequence": anywhere. Every entry is a masked matrix product, o = (M * W) @ X with the
# causal mask M zeroing the weights of later tokens: a NaN in a later row of X (a value, or a key or step size that
# an earlier factor of X carries) gives 0 * NaN = NaN in the earlier rows. No masked_fill can help where the NaN is
# in X itself; only a triangular product that never reads the masked blocks would, at a real cost in speed. Every
# position from the NaN token on is NaN exactly where the reference is: the NaN is never hidden.
_CHUNK_WY = "the chunk's triangular (WY/UT) system and its intra-chunk product read the whole chunk"
BACKWARD_SPREAD = {
    **{(name, "chunk"): ("chunk", _CHUNK_WY) for name in (
        "delta_rule", "gated_delta_rule", "longhorn", "nlms", "leaky_lms", "decoupled_gated_delta_rule",
        "delta_product", "delta_rule_multistep", "momentum_delta_rule", "oja_rule", "omega_rule", "multi_step_gd",
    )},
    ("linear_attn", "chunk"): ("chunk", "the intra-chunk product (q k^T * mask) @ v"),
    ("gated_linear_attn", "chunk"): ("chunk", "the intra-chunk product (q k^T * decay mask) @ v"),
    ("least_squares", "chunk"): ("chunk", "the intra-chunk products of the covariances and the read-out"),
    ("hla2", "chunk"): ("chunk", "the intra-chunk masked products of the second-order moments"),
    ("ahla", "chunk"): ("chunk", "the intra-chunk masked products of the moments"),
    ("hla3", "chunk"): ("chunk", "the intra-chunk masked products of the third-order moments"),
    ("hla3_paper", "chunk"): ("chunk", "the intra-chunk masked products of the third-order moments"),
    ("ttt", "chunk"): ("chunk", "the mini-batch's masked gradient products (its block may start up to C - 1 tokens "
                                "earlier: the state continues a mini-batch midway)"),
    ("local_polynomial", "chunk"): ("chunk", "a block of C queries shares one masked design matrix"),
    ("linear_attn", "reference"): ("sequence", "(q k^T * mask) @ v over the whole sequence"),
    ("gated_linear_attn", "reference"): ("sequence", "(q k^T * decay mask) @ v over the whole sequence"),
    ("least_squares", "reference"): ("sequence", "the masked [T, T] weights times the outer products"),
    ("softmax_attn", "reference"): ("sequence", "softmax(masked logits) @ v: a masked weight is 0"),
    ("local_linear_attn", "reference"): ("sequence", "the masked [T, T] weights times the design"),
    ("local_polynomial", "reference"): ("sequence", "the masked [T, T] weights times the design"),
    ("deltaformer", "reference"): ("sequence", "the masked [T, T] erase and read matrices"),
    ("hla2", "reference"): ("sequence", "the masked [T, T] moment matrices"),
    ("ahla", "reference"): ("sequence", "the masked [T, T] moment matrices"),
    ("hla3", "reference"): ("sequence", "the masked [T, T] moment matrices"),
    ("hla3_paper", "reference"): ("sequence", "the masked [T, T] moment matrices"),
    ("selective_scan", "reference"): ("sequence", "the masked [T, T] decay matrix times the inputs"),
    ("softmax_attn", "chunk"): ("sequence", "SDPA's (fused) softmax(masked logits) @ v"),
    ("local_linear_attn", "chunk"): ("chunk", "a block of C queries: its masked weights times its pairs' features"),
    ("kernel_regression", "chunk"): ("sequence", "o_t = sum_i U[i, t] W[i] as one masked contraction"),
    ("deltaformer", "chunk"): ("sequence", "the masked erase and read products of each block"),
}

NAN_CASES = [(name, argument) for name in OPS for argument in _tokens(name)]


def _nan_positions(o: torch.Tensor) -> torch.Tensor:
    """[B, T, H, ...] -> [B, T, H] bool: which (b, t, h) have a non-finite output."""
    bad = ~torch.isfinite(o)
    return bad.flatten(3).any(-1) if bad.ndim > 3 else bad


def _nan_rows(state) -> dict[str, torch.Tensor]:
    """Each field of a state -> [N] bool: which sequences have a non-finite entry in it."""
    return {name: ~torch.isfinite(s.flatten(1)).all(-1) for name, s in flatten_state(state).items()}


def _with_nan(name, argument, t0):
    """Every form's (o, final state) on the example with a NaN in one entry of token t0 of sequence 0."""
    op, tokens, state = _example(name, T)
    x = tokens[argument].clone()
    x[(0, t0) + (0,) * (x.ndim - 2)] = float("nan")
    tokens[argument] = x
    with value_checks(False):  # as on a GPU: nothing reads the values, so what comes out must say NaN
        return {mode: _call(op, tokens, state, mode) for mode in FORMS}


@pytest.mark.parametrize("t0", [0, 5])
@pytest.mark.parametrize(("name", "argument"), NAN_CASES)
def test_nan_in_one_token_is_nan_at_the_same_positions_in_every_form(name, argument, t0):
    results = _with_nan(name, argument, t0)
    nan = {mode: _nan_positions(o) for mode, (o, _) in results.items()}
    if t0:  # (at the first token some inputs are unused: DeltaFormer's erase vector has nothing before it to erase)
        assert nan["reference"][:, t0:].any(), "the NaN must reach the output"
    for mode in FORMS:
        label = f"{name}, NaN in {argument}[0, {t0}], {mode} form"
        differs = (nan[mode][:, t0:] != nan["reference"][:, t0:]).nonzero().tolist()
        assert not differs, f"{label}: NaN where the reference is finite or the reverse, at [b, t - t0, h] {differs}"
        spread, why = BACKWARD_SPREAD.get((name, mode), (None, None))
        allowed_from = {None: t0, "chunk": max(t0 - (C - 1), 0), "sequence": 0}[spread]
        early = nan[mode][:, :allowed_from].nonzero().tolist()
        assert not early, f"{label}: NaN before the NaN token at [b, t, h] {early} ({why or 'not in BACKWARD_SPREAD'})"
        for field, rows in _nan_rows(results["reference"][1]).items():
            hidden = rows & ~_nan_rows(results[mode][1])[field]
            assert not hidden.any(), f"{label}: final {field} finite where the reference's is NaN"


def test_backward_spread_names_exactly_the_forms_that_spread_and_how_far():
    """No entry of BACKWARD_SPREAD is looser than needed: each (op, form) there spreads a NaN before its token on
    some input (t0 = 5), and as far as the entry says; the test above checks that no other form does."""
    t0 = 5
    observed = {}
    for name, argument in NAN_CASES:
        for mode, (o, _) in _with_nan(name, argument, t0).items():
            early = _nan_positions(o)[:, :t0].any(0).any(-1).nonzero()  # [n, 1]: the times before t0 with a NaN
            if len(early):
                spread = "chunk" if early.min().item() >= t0 - (C - 1) else "sequence"
                observed[name, mode] = max(observed.get((name, mode), spread), spread, key=["chunk", "sequence"].index)
    assert observed == {key: spread for key, (spread, _) in BACKWARD_SPREAD.items()}


# --- NaN in a scale, gate or step size ---------------------------------------------------------------------------

# Arguments whose values are free (any real number is valid, so NaN there is a NaN input, not an out-of-range one):
# queries, keys, values, erase vectors, Mamba's x, B, C and skip D, and DeltaFormer's gates (its docstring imposes
# no range). Every other tensor argument of an example is range-checked: a log gate <= 0, a step size >= 0, ...
FREE = {"q", "k", "v", "w", "x", "B", "C", "D"}
FREE_OF = {"deltaformer": {"alpha", "beta"}}


def _checked_arguments(name: str) -> list[str]:
    tokens, options, _ = EXAMPLES[name].make(1, 1, 1, 2, 2, torch.float64, torch.Generator().manual_seed(0))
    tensors = [*tokens, *(n for n, x in options.items() if isinstance(x, torch.Tensor))]
    return [n for n in tensors if n not in FREE | FREE_OF.get(name, set())]


CHECKED_CASES = [(name, argument) for name in OPS for argument in _checked_arguments(name)]


def test_every_op_with_a_gate_or_step_size_has_a_checked_case():
    assert {name for name, _ in CHECKED_CASES} >= {
        "gated_linear_attn", "delta_rule", "gated_delta_rule", "longhorn", "leaky_lms", "decoupled_gated_delta_rule",
        "delta_product", "delta_rule_multistep", "momentum_delta_rule", "oja_rule", "omega_rule", "multi_step_gd",
        "least_squares", "hla2", "ahla", "selective_scan", "ttt"}


@pytest.mark.parametrize(("name", "argument"), CHECKED_CASES)
def test_nan_gate_or_step_size_raises_value_error_naming_it(name, argument):
    tokens, options, state = EXAMPLES[name].make(B, 5, H, K, V, torch.float64, torch.Generator().manual_seed(0))
    arguments = {**tokens, **options}
    x = arguments[argument].clone()
    x.view(-1)[x.numel() // 2] = float("nan")
    arguments[argument] = x
    for mode in FORMS:
        with pytest.raises(ValueError, match=rf"^{argument}\b"):
            OPS[name](**arguments, initial_state=state, mode=mode)


@pytest.mark.parametrize("name", [name for name in OPS if "scale" in OPS[name].__signature__.parameters])
@pytest.mark.parametrize("scale", [float("nan"), float("inf")])
def test_non_finite_scale_raises_value_error_naming_it(name, scale):
    op, tokens, state = _example(name, 5)
    with pytest.raises(ValueError, match="scale"):
        op(**tokens, initial_state=state, scale=scale)


# --- empty batches and sequences ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", FORMS)
@pytest.mark.parametrize("name", list(OPS))
def test_empty_batch_gives_empty_outputs_and_states_in_every_form(name, mode):
    op, tokens, state = _example(name, 5, B=0)
    o, final = _call(op, tokens, state, mode)
    _, tokens1, state1 = _example(name, 5, B=1)
    o1, final1 = _call(op, tokens1, state1, "reference")
    assert o.shape == (0, *o1.shape[1:])
    shapes = {n: s.shape for n, s in flatten_state(final).items()}
    assert shapes == {n: (0, *s.shape[1:]) for n, s in flatten_state(final1).items()}


@pytest.mark.parametrize("with_state", [True, False], ids=["initial-state", "no-state"])
@pytest.mark.parametrize("mode", FORMS)
@pytest.mark.parametrize("name", list(OPS))
def test_empty_sequence_gives_an_empty_output_and_the_state_it_started_from(name, mode, with_state):
    """T = 0: the output is [B, 0, ...], and the final state is where the call started: continuing from it equals
    continuing from the initial state (or from none), outputs and final state. (Field by field it may differ where
    a state has a canonical form: TTT's anchor is its params at offset 0.)"""
    op, tokens, state = _example(name, 0)
    state = state if with_state else None
    o, final = _call(op, tokens, state, mode)
    o1, _ = _call(op, *_example(name, 1)[1:], "reference")
    assert o.shape == (B, 0, *o1.shape[2:])
    _, later, _ = _example(name, 3, seed=1)
    expected, expected_final = _call(op, later, state, "reference")
    continued, continued_final = _call(op, later, final, "reference")
    assert_close(continued, expected, f"{name}: o after the T = 0 call")
    expected_fields = flatten_state(expected_final)
    for field, s in flatten_state(continued_final).items():
        assert_close(s, expected_fields[field], f"{name}: final {field} after the T = 0 call")


# --- the least-squares chunk form's padding ----------------------------------------------------------------------

# One least_squares call's peak memory (MiB above the resident set before it), on Linux: /proc/self/clear_refs resets
# the high-water mark VmHWM. The caller sets MALLOC_MMAP_THRESHOLD_ so that glibc maps every tensor of 64 KiB or more
# on its own and unmaps it when freed: the resident set then follows the live tensors, not malloc's free lists.
_PEAK_SCRIPT = """
import torch
from regmem.ops import least_squares
def status_mib(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) / 1024
def peak_mib(**options):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_mib("VmRSS:")
    least_squares(q, k, v, ridge=1.0, **options)
    return status_mib("VmHWM:") - before
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 4, 1, 1024, generator=gen) for _ in range(3))
with torch.no_grad():
    peak_mib(chunk_size=4)  # the first call also pays for lazy initialisation
    print(peak_mib(chunk_size=4), peak_mib())
"""


def test_least_squares_chunk_form_pads_a_short_sequence_to_its_length_not_a_whole_chunk():
    """K = V = 1024, T = 4 (float32): the default call (chunk_size 64) peaks within 2x of the chunk_size=4 call,
    where padding to 64 tokens held 16x the [T, F, F] covariances (~1040 MiB against ~80 MiB)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    result = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).parent, env=env)
    short, default = map(float, result.stdout.split())
    assert short > 0
    assert default <= 2 * short, f"peak {default:.0f} MiB (default chunk_size) vs {short:.0f} MiB (chunk_size=4)"
