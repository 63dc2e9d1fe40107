"""Capacity of regmem's ops used as black-box memories, with the SNR of arXiv:2505.19488 (Sec. 2.1, eqs. 4-6):
linear attention is the linear-kernel memory, least squares recalls exactly below d_k pairs, softmax attention has
the least noise far beyond d_k, and the delta rule recalls its newest pair exactly."""

import pytest
import torch

from regmem.analysis import CAPACITY_OPS, capacity_curve, measure_op_inverse_snr, probe_sequence
from regmem.ops import linear_attn


def _rel(a: float, b: float) -> float:
    return abs(a / b - 1)


def _pairs(b, N, d_k, d_v, seed=0):
    gen = torch.Generator().manual_seed(seed)
    keys, values = torch.randn(b, N, d_k, generator=gen, dtype=torch.float64), torch.randn(b, N, d_v, generator=gen,
                                                                                           dtype=torch.float64)
    return keys * d_k**0.5 / keys.norm(dim=-1, keepdim=True), values


def test_linear_attention_measures_the_linear_kernel_closed_form():
    d_k = 16
    for N in (64, 256):
        assert _rel(measure_op_inverse_snr("linear_attn", N, d_k, trials=256), (N - 1) / d_k) < 0.10


def test_the_marker_channel_reads_the_signal_gain_exactly():
    keys, values = _pairs(3, 10, 8, 4)
    index = torch.tensor([0, 4, 9])
    q, k, v, write = probe_sequence(keys, values, index)
    assert q.shape == k.shape == (3, 11, 1, 8) and v.shape == (3, 11, 1, 5) and write.shape == (3, 11, 1)
    o = linear_attn(q, k, v, scale=1.0)[0][:, -1, 0]  # [3, 5]
    assert (o[:, -1] - 8.0).abs().max() < 1e-12  # c = ||k_i||^2 = d_k
    read = torch.einsum("bn,bnv->bv", torch.einsum("bnd,bd->bn", keys, keys[torch.arange(3), index]), values)
    assert (o[:, :-1] - read).abs().max() < 1e-12  # c v_i + r = sum_j (k_j.k_i) v_j: the probe wrote nothing


def test_a_callable_memory_runs_as_a_black_box():
    def hand_written(q, k, v, write):  # causal sum_j (k_j.q_t) v_j
        scores = torch.einsum("bthd,bshd->bts", q, k).tril()
        return torch.einsum("bts,bshv->bthv", scores, v)

    named = measure_op_inverse_snr("linear_attn", 32, 8, trials=16, seed=1)
    assert _rel(measure_op_inverse_snr(hand_written, 32, 8, trials=16, seed=1), named) < 1e-10


def test_least_squares_recalls_exactly_below_capacity_and_beats_linear_beyond():
    d_k = 16
    assert measure_op_inverse_snr("least_squares", d_k // 2, d_k, trials=32) < 1e-8
    for op in ("linear_attn", "delta_rule", "hla2"):
        assert measure_op_inverse_snr(op, d_k // 2, d_k, trials=32) > 0.05
    for N in (2 * d_k, 4 * d_k):  # same seed, same pairs: ~N / d_k - 1 against (N - 1) / d_k
        assert measure_op_inverse_snr("least_squares", N, d_k) < measure_op_inverse_snr("linear_attn", N, d_k) - 0.5


def test_softmax_attention_has_the_least_noise_of_table_2s_memories_far_beyond_dk():
    d_k, N = 16, 256
    curves = {op: measure_op_inverse_snr(op, N, d_k, trials=32) for op in CAPACITY_OPS if op != "deltaformer"}
    assert curves["softmax_attn"] < curves["linear_attn"] / 10
    assert min(curves, key=curves.get) == "softmax_attn"


def test_deltaformer_trades_noise_at_few_pairs_for_less_noise_at_many():
    """Measured (d_k = 16, seeds 0 and 1): the softmax-normalised erase costs recall with few pairs (SNR^-1 0.34-0.46
    against softmax attention's 0.012-0.013 at N = 8) and removes noise with many (0.26-0.32 against 0.47-0.50 at
    N = 256)."""
    d_k = 16
    for seed in (0, 1):
        ops = ("softmax_attn", "deltaformer")
        few = {op: measure_op_inverse_snr(op, 8, d_k, trials=32, seed=seed) for op in ops}
        many = {op: measure_op_inverse_snr(op, 256, d_k, trials=32, seed=seed) for op in ops}
        assert few["deltaformer"] > 5 * few["softmax_attn"]
        assert many["deltaformer"] < 0.8 * many["softmax_attn"]


def test_the_delta_rule_recalls_its_newest_pair_exactly():
    keys, values = _pairs(2, 24, 8, 4, seed=2)
    q, k, v, write = probe_sequence(keys, values, torch.tensor([23, 23]))
    o = CAPACITY_OPS["delta_rule"](q, k, v, write)[:, -1, 0]  # unit keys, beta = 1: the last write overwrites
    c = o[:, -1]
    r = o[:, :-1] - c.unsqueeze(-1) * values[:, 23]
    assert (c > 0).all() and r.abs().max() < 1e-12


def test_projection_gain_absorbs_the_noise_along_the_value():
    rho = measure_op_inverse_snr("linear_attn", 64, 16, trials=1024)
    projected = measure_op_inverse_snr("linear_attn", 64, 16, trials=1024, gain="projection")
    assert _rel(projected, rho * (1 - 1 / 32) / (1 + rho / 32)) < 0.10  # d_v = 32


def test_capacity_curve_is_one_measurement_per_n():
    curve = capacity_curve("softmax_attn", [8, 32], 8, trials=8, seed=3)
    assert curve == [measure_op_inverse_snr("softmax_attn", N, 8, trials=8, seed=3) for N in (8, 32)]
    assert curve[0] < curve[1]


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"op": "mamba"}, "op"),
    ({"gain": "oracle"}, "gain"),
    ({"N": 0}, "N"),
    ({"trials": 0}, "trials"),
])
def test_bad_arguments_raise_naming_them(kwargs, argument):
    args = {"op": "linear_attn", "N": 8, "d_k": 4, "trials": 2, **kwargs}
    with pytest.raises(ValueError, match=argument):
        measure_op_inverse_snr(args.pop("op"), args.pop("N"), args.pop("d_k"), **args)
