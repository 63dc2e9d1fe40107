"""The inner model of the test-time-training engine: a small regressor f_theta fitted inside the forward pass, its
inner losses, and the hand-derived pieces the recurrent and chunk forms need (layer inputs, back-propagated errors).

The regressor (one per sequence and head) is a stack of linear layers with an element-wise activation between them,
optionally with biases, an output layer norm with outer (not test-time) parameters, and a residual:

    a_0 = x,   h_l = [a_{l-1}, 1] W_l   (the 1 only with bias=True),   a_l = act(h_l) for l < L
    f(x) = [x +] [LN_{gamma, beta}](h_L)

`hidden=()` is the linear regressor k -> W^T k of every linear memory in regmem (TTR, arXiv:2501.12352, Sec. 3);
`hidden=(4K,)` with `residual=True, layer_norm=True, bias=True` is TTT-MLP (Sun et al., arXiv:2407.04620, Sec. 2.7:
f(x) = x + LN(f_res(x))); `hidden=(), residual=True, layer_norm=True, bias=True` is TTT-Linear; the Titans memory
(arXiv:2501.00663, Sec. 3.1) is a bias-free MLP of depth >= 2; Nested Learning's memories (arXiv:2512.24695, eq. 89)
are the residual 2-layer MLP x + W_1 act(W_2 x).

Layout: every parameter W_l is [..., d_in (+1), d_out] and reads rows, h = x W (the transpose of the papers' M with
y = M x, the orientation of regmem's linear memories, S = M^T). All parameters of one (sequence, head) are packed
in one flat vector [..., P] (`InnerModel.unpack` / `pack`), so the engine's state has the same four fields for any
regressor.

Inner losses, per token, summed over the V output channels (r = f(k) - v):
    "l2"    1/2 ||r||^2                       (the regression of eq. 8 of TTR)
    "dot"   -<f(k), v>                        (linear attention as one gradient step; TTR eq. 24)
    "huber" sum_j huber_delta(r_j)            (delta = `loss_param`; quadratic below delta, linear above)
    "lp"    1/p sum_j |r_j|^p                 (p = `loss_param` >= 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F

# "gelu_tanh": GELU's tanh approximation, official TTT-MLP's (ttt-lm-pytorch; arXiv:2407.04620)
Activation = Literal["gelu", "gelu_tanh", "silu", "relu", "tanh", "identity"]
Loss = Literal["l2", "dot", "huber", "lp"]  # the inner losses (module docstring)
# "explicit": every layer steps with eta_t, as printed; "proximal": a step that cannot expand (layer_steps)
StepRule = Literal["explicit", "proximal"]
ACTIVATIONS, LOSSES, STEP_RULES = get_args(Activation), get_args(Loss), get_args(StepRule)
LN_EPS = 1e-6


def activation(name: Activation, h: torch.Tensor) -> torch.Tensor:
    if name == "gelu":
        return F.gelu(h)
    if name == "gelu_tanh":
        return F.gelu(h, approximate="tanh")
    if name == "silu":
        return F.silu(h)
    if name == "relu":
        return F.relu(h)
    if name == "tanh":
        return torch.tanh(h)
    return h


def activation_backward(name: Activation, grad: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """grad * d act / d h at the pre-activation h (the recurrent and chunk forms do not call autograd inside the
    forward). GELU's is torch's own gelu_backward, one op that autograd differentiates again (the outer gradient
    through the inner one; tests/ops/test_ttt.py checks it against Phi(h) + h phi(h)); the others are written out
    (torch's silu_backward has no derivative)."""
    if name == "gelu":  # exact GELU: h Phi(h), derivative Phi(h) + h phi(h)
        return torch.ops.aten.gelu_backward(grad, h)
    if name == "gelu_tanh":  # the derivative of the tanh approximation itself
        return torch.ops.aten.gelu_backward(grad, h, approximate="tanh")
    if name == "silu":
        s = torch.sigmoid(h)
        return grad * (s * (1.0 + h * (1.0 - s)))
    if name == "relu":
        return grad * (h > 0).to(h.dtype)
    if name == "tanh":
        return grad * (1.0 - torch.tanh(h) ** 2)
    return grad


@dataclass(frozen=True)
class InnerModel:
    """The regressor fitted at test time (module docstring). `hidden`: widths of the hidden layers, () for a linear
    map; `activation` between layers; `bias`: each layer has a bias (an input column of ones); `residual`: f(x) = x +
    ...  (needs K == V); `layer_norm`: a layer norm on the last layer's output, with per-head outer parameters."""

    hidden: tuple[int, ...] = ()
    activation: Activation = "gelu"
    bias: bool = False
    residual: bool = False
    layer_norm: bool = False
    # the layer norm's epsilon: it bounds the norm's gain, at most 1 / sqrt(eps), where outputs of small spread would
    # otherwise be multiplied by the inverse of their standard deviation
    ln_eps: float = LN_EPS

    def __post_init__(self):
        if not self.ln_eps > 0:
            raise ValueError(f"ln_eps must be > 0, got {self.ln_eps!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if any(not isinstance(w, int) or w < 1 for w in self.hidden):
            raise ValueError(f"hidden must be a tuple of positive widths, got {self.hidden!r}")

    @property
    def depth(self) -> int:
        return len(self.hidden) + 1

    def shapes(self, K: int, V: int) -> list[tuple[int, int]]:
        """(rows, columns) of each W_l: rows = input width (+1 with a bias)."""
        dims = [K, *self.hidden, V]
        return [(dims[i] + int(self.bias), dims[i + 1]) for i in range(self.depth)]

    def num_params(self, K: int, V: int) -> int:
        return sum(r * c for r, c in self.shapes(K, V))

    def check_dims(self, K: int, V: int) -> None:
        if self.residual and K != V:
            raise ValueError(f"a residual inner model needs K == V, got K = {K}, V = {V}")

    def unpack(self, flat: torch.Tensor, K: int, V: int) -> list[torch.Tensor]:
        """flat: [..., P] -> [W_1, ..., W_L], each [..., rows, columns] (views)."""
        out, start = [], 0
        for r, c in self.shapes(K, V):
            out.append(flat[..., start:start + r * c].unflatten(-1, (r, c)))
            start += r * c
        return out

    @staticmethod
    def pack(weights: list[torch.Tensor]) -> torch.Tensor:
        """[W_1, ..., W_L] -> flat [..., P]."""
        return torch.cat([w.flatten(-2) for w in weights], dim=-1)

    def init(self, H: int, K: int, V: int, *, generator: torch.Generator | None = None,
             dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Initial parameters [H, P] for a meta-learned initial memory: W_l ~ N(0, 1 / fan_in), biases 0; the last
        layer is scaled by 1/2 when the model is residual, so f starts near the identity."""
        weights = []
        for i, (r, c) in enumerate(self.shapes(K, V)):
            fan_in = r - int(self.bias)
            w = torch.randn(H, r, c, generator=generator, dtype=dtype) * fan_in**-0.5
            if self.bias:
                w[:, -1] = 0.0
            if self.residual and i == self.depth - 1:
                w = 0.5 * w
            weights.append(w)
        return self.pack(weights)

    def layer_input(self, a: torch.Tensor) -> torch.Tensor:
        """a: [..., n, d] -> [..., n, d (+1)]: the rows a layer multiplies (a column of ones with a bias)."""
        return F.pad(a, (0, 1), value=1.0) if self.bias else a

    def forward(self, weights: list[torch.Tensor], x: torch.Tensor, ln: tuple | None):
        """x: [..., n, K] rows; weights: [W_l] each [..., rows, columns]; ln: (gamma, beta) broadcastable to
        [..., n, V] or None. Returns f(x): [..., n, V] and the trace (layer inputs, pre-activations, the layer norm's
        mean and rstd or None) that `backward` needs."""
        inputs, pre, stats = [], [], None
        a = x
        for i, w in enumerate(weights):
            xin = self.layer_input(a)
            h = matmul(xin, w)
            inputs.append(xin)
            pre.append(h)
            a = activation(self.activation, h) if i < self.depth - 1 else h
        y, stats = layer_norm_with_stats(a, ln, self.ln_eps) if self.layer_norm else (a, None)
        if self.residual:
            y = y + x
        return y, (inputs, pre, stats)

    def forward_parts(self, weights: list[torch.Tensor], xs: list[torch.Tensor], ln: tuple | None) -> list[tuple]:
        """`forward` of several row sets [..., n_i, K] through the same weights as one call on their rows joined
        (fewer, larger products): [(f(x_i), trace_i)] as `forward` returns them for each."""
        sizes = [x.shape[-2] for x in xs]
        y, (inputs, pre, stats) = self.forward(weights, torch.cat(xs, dim=-2), ln)
        def parts(ts):  # each tensor of ts split into the row sets
            return [t.split(sizes, dim=-2) for t in ts]

        ys, ins, pres, st = y.split(sizes, dim=-2), parts(inputs), parts(pre), parts(stats or ())
        return [(ys[i], ([t[i] for t in ins], [t[i] for t in pres], tuple(t[i] for t in st) if st else None))
                for i in range(len(xs))]

    def backward(self, weights: list[torch.Tensor], trace, dy: torch.Tensor, ln: tuple | None) -> list[torch.Tensor]:
        """The back-propagated error delta_l = dloss/dh_l of each layer, [..., n, d_out], from dloss/df = dy: the
        gradient of W_l is inputs_l^T delta_l (an outer product per token)."""
        inputs, pre, stats = trace
        d = layer_norm_backward(pre[-1], dy, ln, stats, self.ln_eps) if self.layer_norm else dy
        deltas = [d]
        for i in range(self.depth - 1, 0, -1):
            w = weights[i][..., : weights[i].shape[-2] - int(self.bias), :]  # the rows fed by a_{i}, not the bias
            d = activation_backward(self.activation, matmul(d, w.transpose(-1, -2)), pre[i - 1])
            deltas.append(d)
        return deltas[::-1]


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b; torch.bmm itself for two 3-D operands of one batch size (self-modifying Titans' fused path keeps every
    tensor so), where `@` wraps the bmm in views: one autograd node instead of two to five, in a loop of thousands."""
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
        return torch.bmm(a, b)
    return a @ b


def layer_norm(h: torch.Tensor, ln: tuple | None, eps: float = LN_EPS) -> torch.Tensor:
    """LayerNorm over the last dim with `eps` and the affine (gamma, beta) of `ln` (None: no affine). torch's
    fused kernel: one op forward and one backward, where the written-out form was ~8 and ~15 (the deep memories
    run it per mini-batch, so the count of small ops sets their speed)."""
    return layer_norm_with_stats(h, ln, eps)[0]


def layer_norm_with_stats(h: torch.Tensor, ln: tuple | None, eps: float = LN_EPS) -> tuple[torch.Tensor, tuple]:
    """`layer_norm` and its (mean, rstd) [..., 1], which `layer_norm_backward` reuses instead of normalising again."""
    y, mean, rstd = torch.native_layer_norm(h, h.shape[-1:], None, None, eps)
    return (y if ln is None else y * ln[0] + ln[1]), (mean, rstd)


def layer_norm_backward(h: torch.Tensor, dy: torch.Tensor, ln: tuple | None,
                        stats: tuple | None = None, eps: float = LN_EPS) -> torch.Tensor:
    """dloss/dh for y = layer_norm(h, ln) given dloss/dy: rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma,
    by torch's own LayerNorm backward, which autograd differentiates again (the outer gradient through the inner
    one) by its double-backward formula (tests/ops/test_ttt.py checks it against the written-out form). stats: h's
    (mean, rstd) from `layer_norm_with_stats`, or None to compute them."""
    gx = dy if ln is None else dy * ln[0]
    mean, rstd = stats if stats is not None else torch.native_layer_norm(h, h.shape[-1:], None, None, eps)[1:]
    # contiguous: torch's CPU kernel (2.13) reads strided mean and rstd as if they were dense (wrong gradients for
    # a split of the stats, `InnerModel.forward_parts`); a no-op for the stats native_layer_norm returns
    mean, rstd = mean.contiguous(), rstd.contiguous()
    return torch.ops.aten.native_layer_norm_backward(gx, h, h.shape[-1:], mean, rstd, None, None,
                                                     [True, False, False])[0]


def layer_steps(step_rule: StepRule, eta: torch.Tensor, x_sq: list[torch.Tensor], g_sq: list[torch.Tensor],
                r_sq: torch.Tensor, log_mu: torch.Tensor | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The step of each layer for one set of tokens. eta: [..., n, 1], the token's eta_t; x_sq, g_sq: per layer
    [..., n, 1], ||x_l||^2 (the layer's input at the anchor, with the bias's 1) and ||G_l||_F^2 = ||x_l||^2
    ||delta_l||^2 (its gradient); r_sq: [..., n, 1], ||dloss/dy||^2; log_mu: [..., n, 1] momentum log retention or
    None. Returns (the steps that scale each layer's gradient, the steps rho of its DGD term).

    "explicit" is the papers' printed rule: eta_t everywhere. "proximal" gives layer l
        eta_l = eta_t / (1 + eta_t max(||x_l||^2, ||G_l||^2 / ||r||^2))
    For the output layer (delta_L = r) this is eta_t / (1 + eta_t ||x_L||^2): W - eta_l x^T (x W - v) is the exact
    minimiser of 1/2 ||x W - v||^2 + 1/(2 eta) ||W - W_0||^2 (the implicit step of the l2 loss), and with DGD
    (I - eta_l x^T x)(W - ...) is the exact minimiser of Nested Learning's eq. 56 for one input (Sherman-Morrison;
    DERIVATION.md §5, `dgd_step(proximal=True)`). On a hidden layer ||delta_l|| / ||r|| is the gain from its
    pre-activation to the output along the residual, so eta_l is the same proximal step for the loss linearised in
    that layer (normalised LMS per layer). Since eta_l ||x_l||^2 < 1, the transition I - eta_l x^T x has
    eigenvalues in [0, 1] (DGD's term stays a contraction) whatever ||x||; the explicit step expands once
    eta ||x||^2 > 2 (> 1 with DGD). With momentum the proximal rule feeds (1 - mu_t) eta_l G_l into it (an EMA,
    whose accumulated step is at most one proximal step); the heavy-ball sum of the printed rule expanded on
    switching inputs even with eta_l (tests/ops/test_ttt_stable.py)."""
    if step_rule == "explicit":
        return [eta] * len(x_sq), [eta] * len(x_sq)
    tiny = torch.finfo(r_sq.dtype).tiny  # r = 0 means G = 0: the ratio is then 0
    rhos = [eta / (1.0 + eta * torch.maximum(x2, g2 / (r_sq + tiny))) for x2, g2 in zip(x_sq, g_sq, strict=True)]
    if log_mu is None:
        return rhos, rhos
    ema = -torch.expm1(log_mu)  # 1 - mu_t
    return [ema * rho for rho in rhos], rhos


def norms_sq(inputs: list[torch.Tensor], deltas: list[torch.Tensor], dy: torch.Tensor):
    """||x_l||^2, ||G_l||^2 = ||x_l||^2 ||delta_l||^2 per layer and ||dy||^2, each [..., n, 1] (layer_steps)."""
    x_sq = [x.pow(2).sum(-1, keepdim=True) for x in inputs]
    g_sq = [x2 * d.pow(2).sum(-1, keepdim=True) for x2, d in zip(x_sq, deltas, strict=True)]
    return x_sq, g_sq, dy.pow(2).sum(-1, keepdim=True)


def check_loss(loss: Loss, loss_param: float | None) -> None:
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    if loss == "huber" and (loss_param is None or loss_param <= 0):
        raise ValueError(f"loss_param (the Huber delta) must be > 0 for loss='huber', got {loss_param!r}")
    if loss == "lp" and (loss_param is None or loss_param < 1):
        raise ValueError(f"loss_param (the exponent p) must be >= 1 for loss='lp', got {loss_param!r}")


def inner_loss(loss: Loss, y: torch.Tensor, v: torch.Tensor, loss_param: float | None) -> torch.Tensor:
    """The literal inner loss of each token: y, v [..., V] -> [...] (the reference form differentiates this)."""
    if loss == "dot":
        return -(y * v).sum(-1)
    r = y - v
    if loss == "l2":
        return 0.5 * r.pow(2).sum(-1)
    if loss == "huber":
        return F.huber_loss(y, v, reduction="none", delta=loss_param).sum(-1)
    return r.abs().pow(loss_param).sum(-1) / loss_param


def loss_grad(loss: Loss, y: torch.Tensor, v: torch.Tensor, loss_param: float | None) -> torch.Tensor:
    """d inner_loss / d y, written out: [..., V]."""
    if loss == "dot":
        return -v
    r = y - v
    if loss == "l2":
        return r
    if loss == "huber":
        return r.clamp(-loss_param, loss_param)
    return r.abs().pow(loss_param - 1) * torch.sign(r)
