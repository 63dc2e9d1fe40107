"""Every op of `regmem.ops.OPS`, from one registry of example inputs (`regmem/ops/examples.py`), so an op added later
is covered automatically: it has the three forms of the op contract and defaults to the chunk form; reference ==
recurrent == chunk (outputs, final state and every gradient, initial_state included) in float64 and float32;
splitting the sequence and carrying the state equals one call; a chunk-form prefill then one-token recurrent steps
equals one call; cu_seqlens equals one call per sequence; bf16 inputs give a bf16 output and a float32 state; a bad
mode or chunk_size raises ValueError naming it. The families' own test files check each op's math."""

import inspect
import re
from functools import partial
from pathlib import Path

import pytest
import torch

from helpers import (
    DTYPES,
    assert_cu_seqlens_equals_per_sequence,
    assert_decoding_equals_full,
    assert_forms_agree,
    assert_packed_equals_per_sequence,
    assert_split_equals_one_call,
    flatten_state,
)
from regmem.ops import OPS, Op
from regmem.ops.examples import EXAMPLES, VARIANTS, example_of

CASES = [*EXAMPLES, *VARIANTS]  # labels of example_of
B, H, K, V = 2, 2, 6, 5


def _example(case, T, *, dtype=torch.float64, B=B, seed=0):
    name, example = example_of(case)
    T = min(T, example.max_len or T)
    tokens, options, state = example.make(B, T, H, K, V, dtype, torch.Generator().manual_seed(seed))
    return partial(OPS[name], **options), tokens, state


def _contract_exceptions() -> set[str]:
    """The ops docs/architecture.md lists as departing from the calling convention."""
    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    section = text[text.index("depart from the calling convention"):text.index("**How an op is declared**")]
    return set(re.findall(r"^- `([a-z_0-9]+)\(", section, flags=re.MULTILINE))


def _follows_calling_convention(name: str) -> bool:
    """Arguments q, k, v first, and scale=None equal to scale=K ** -0.5 (on the op's example, with its state)."""
    if list(inspect.signature(OPS[name]).parameters)[:3] != ["q", "k", "v"]:
        return False
    op, tokens, state = _example(name, 8)
    default, _ = op(**tokens, initial_state=state, scale=None, mode="reference")
    explicit, _ = op(**tokens, initial_state=state, scale=K ** -0.5, mode="reference")
    return bool(torch.equal(default, explicit))


def test_every_op_follows_the_calling_convention_or_is_a_documented_exception():
    departing = {name for name in OPS if not _follows_calling_convention(name)}
    documented = _contract_exceptions()
    assert documented <= set(OPS), documented - set(OPS)
    assert departing <= documented, f"list these in docs/architecture.md (The op contract): {departing - documented}"
    assert departing | {"deltaformer"} == documented  # deltaformer departs in its query heads, which this cannot see


def test_every_op_has_an_example():
    assert set(EXAMPLES) == set(OPS), "add an Example to regmem/ops/examples.py for every op of OPS"


def test_example_of_finds_ops_and_variants_and_rejects_other_labels():
    assert example_of("ttt") == ("ttt", EXAMPLES["ttt"])
    assert example_of("gated_delta_rule(diagonal g)") == VARIANTS["gated_delta_rule(diagonal g)"]
    with pytest.raises(ValueError, match="label must be"):
        example_of("gated_delta_rule(scalar g)")


@pytest.mark.parametrize(("label", "gate_shape"), [
    ("delta_rule", None), ("gated_delta_rule", (B, 3, H)), ("gated_delta_rule(diagonal g)", (B, 3, H, K)),
])
def test_delta_rule_examples_have_the_gate_their_label_names(label, gate_shape):
    tokens, _, _ = example_of(label)[1].make(B, 3, H, K, V, torch.float64, torch.Generator().manual_seed(0))
    assert (tuple(tokens["g"].shape) if "g" in tokens else None) == gate_shape


@pytest.mark.parametrize("name", list(OPS))
def test_op_has_three_forms_and_defaults_to_chunk(name):
    op = OPS[name]
    assert isinstance(op, Op) and op.__name__ == name
    assert set(op.forms) == {"reference", "recurrent", "chunk"}
    params = inspect.signature(op).parameters
    assert params["mode"].default == "chunk"
    for keyword in ("initial_state", "output_final_state", "chunk_size", "cu_seqlens"):
        assert keyword in params, f"{name} lacks {keyword}"
    fn, tokens, state = _example(name, 5)
    for mode in ("reference", "recurrent", "chunk"):
        o_form, _ = getattr(op, mode)(**tokens, **fn.keywords, initial_state=state)
        o_mode, _ = op(**tokens, **fn.keywords, initial_state=state, mode=mode)
        torch.testing.assert_close(o_form, o_mode, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_forms_match_reference_with_grads(case, dtype):
    op, tokens, state = _example(case, 37, dtype=dtype)
    assert_forms_agree(op, {**tokens, "initial_state": state}, chunk_size=16)


@pytest.mark.parametrize("case", CASES)
def test_split_and_carry_equals_one_call(case):
    op, tokens, _ = _example(case, 23)
    T = next(iter(tokens.values())).shape[1]
    assert_split_equals_one_call(partial(op, chunk_size=8), tokens, [c for c in (1, 5, 11, 17) if c < T])


@pytest.mark.parametrize("case", CASES)
def test_prefill_then_recurrent_steps_equals_one_call(case):
    op, tokens, state = _example(case, 21)
    assert_decoding_equals_full(op, tokens, prefill=13, initial_state=state, chunk_size=8)


@pytest.mark.parametrize("case", CASES)
def test_cu_seqlens_equals_one_call_per_sequence(case):
    lengths = [3, 0, 9, 1]
    op, tokens, state = _example(case, sum(lengths), B=1)
    if state is None:  # a KV cache: packed sequences take no state
        bounds = torch.tensor([0, *lengths]).cumsum(0).tolist()
        assert_packed_equals_per_sequence(lambda q, k, v, **kw: op(q, k, v, **kw), bounds, T=sum(lengths), H=H,
                                          K=K, V=V)
        return
    _, _, states = _example(case, 1, B=len(lengths), seed=1)
    assert_cu_seqlens_equals_per_sequence(op, tokens, lengths, states, f"{case}: ")


@pytest.mark.parametrize("case", CASES)
def test_bf16_inputs_give_a_bf16_output_and_a_float32_state(case):
    op, tokens, state = _example(case, 9)
    bf16 = {n: t.to(torch.bfloat16) for n, t in tokens.items()}
    if state is not None:
        state = type(state)(*(s.float() for s in state)) if isinstance(state, tuple) else state.float()
    o, final = op(**bf16, initial_state=state, output_final_state=True)
    assert o.dtype == torch.bfloat16 and torch.isfinite(o.float()).all()
    assert all(s.dtype == torch.float32 for s in flatten_state(final).values())


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize(("override", "argument"), [({"mode": "parallel"}, "mode"), ({"chunk_size": 48}, "chunk_size")])
def test_bad_mode_or_chunk_size_raises_value_error_naming_it(name, override, argument):
    op, tokens, _ = _example(name, 5)
    with pytest.raises(ValueError, match=argument):
        op(**tokens, **override)


def test_docs_name_each_ops_family_folder():
    """docs/ops.md's "Where each op lives" table lists every op once, under the folder whose module defines it."""
    text = (Path(__file__).parents[2] / "docs" / "ops.md").read_text()
    section = text[text.index("**Where each op lives**"):text.index("The regression memories answer")]
    documented = {op: folder for folder, ops in re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", section, flags=re.MULTILINE)
                  for op in re.findall(r"`([a-z_0-9]+)`", ops)}
    actual = {name: OPS[name].__module__.split(".")[2] for name in OPS}
    assert documented == actual
