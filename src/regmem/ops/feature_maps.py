"""Feature maps phi: R^K -> R^F for feature-mapped linear memories, M_t = M_{t-1} + v_t phi(k_t)^T.

Implements the feature maps of eq. (3) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 2):
the regressor class {k -> M phi(k)} (Sec. 4 Vignette 1, "Nonlinear associative memory"). Each map is token-wise:
x: [..., K] -> [..., F], so it commutes with chunking, state passing and varlen packing. `feature_dim(K)` gives F.

| name            | phi(x)                                             | F           | phi(q).phi(k)              |
|-----------------|----------------------------------------------------|-------------|----------------------------|
| identity        | x                                                  | K           | q.k                        |
| elu_plus_one    | elu(x) + 1 (Katharopoulos et al. 2020)             | K           | positive                   |
| relu            | max(x, 0)                                          | K           | non-negative               |
| cosine          | x / ||x||                                          | K           | cos(q, k)                  |
| taylor2         | [1, x / K^(1/4), vec(x x^T) / sqrt(2K)] (Based)    | 1 + K + K^2 | 1 + x + x^2/2, x=q.k/sqrt K |
| dpfp            | DPFP of Schlag et al. 2021, order nu               | 2 K nu      | non-negative               |
| random_features | exp(W x~ - ||x~||^2/2) / sqrt(m), x~ = x / K^(1/4) | m           | unbiased exp(q.k/sqrt K)   |

`random_features` is FAVOR+ (Choromanski et al. 2021, positive orthogonal random features): its projection W
[m, K] is passed in or drawn from a seed, never from global RNG state. `cosine` is the cosine-similarity kernel;
cosFormer's position-dependent cos re-weighting is not token-wise and is not a feature map here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F


class FeatureMap:
    """A token-wise feature map; subclasses define `__call__(x: [..., K]) -> [..., F]` and `feature_dim`."""

    name = "feature_map"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def feature_dim(self, head_dim: int) -> int:
        return head_dim

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Identity(FeatureMap):
    name = "identity"

    def __call__(self, x):
        return x


class EluPlusOne(FeatureMap):
    name = "elu_plus_one"

    def __call__(self, x):
        return F.elu(x) + 1.0


class Relu(FeatureMap):
    name = "relu"

    def __call__(self, x):
        return F.relu(x)


class Cosine(FeatureMap):
    name = "cosine"

    def __call__(self, x):
        return F.normalize(x, dim=-1)


class Taylor2(FeatureMap):
    """Second-order Taylor expansion of exp(q.k / sqrt(K)) (Based; Arora et al. 2024)."""

    name = "taylor2"

    def __call__(self, x):
        K = x.shape[-1]
        outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2)  # [..., K * K]
        ones = torch.ones_like(x[..., :1])  # [..., 1]
        return torch.cat([ones, x / K**0.25, outer / math.sqrt(2.0 * K)], dim=-1)  # [..., 1 + K + K^2]

    def feature_dim(self, head_dim):
        return 1 + head_dim + head_dim**2


class DPFP(FeatureMap):
    """Deterministic parameter-free projection (Schlag et al. 2021, eq. 30-32) of order `nu`."""

    name = "dpfp"

    def __init__(self, nu: int = 1):
        if nu < 1:
            raise ValueError(f"nu must be >= 1, got {nu}")
        self.nu = nu

    def __call__(self, x):
        x = torch.cat([F.relu(x), F.relu(-x)], dim=-1)  # [..., 2K]
        rolled = torch.cat([x.roll(shifts=j, dims=-1) for j in range(1, self.nu + 1)], dim=-1)  # [..., 2K nu]
        return x.repeat(*([1] * (x.ndim - 1)), self.nu) * rolled  # [..., 2K nu]

    def feature_dim(self, head_dim):
        return 2 * head_dim * self.nu

    def __repr__(self):
        return f"DPFP(nu={self.nu})"


class RandomFeatures(FeatureMap):
    """FAVOR+ positive random features (Performer). `projection`: [m, K], or drawn from `seed`.

    With orthogonal=True the rows are orthogonal blocks rescaled to Gaussian norms (Performer, Sec. 2.4)."""

    name = "random_features"

    def __init__(
        self,
        head_dim: int,
        num_features: int | None = None,  # m; default head_dim
        *,
        seed: int = 0,
        orthogonal: bool = True,
        projection: torch.Tensor | None = None,
    ):
        if projection is None:
            projection = draw_projection(head_dim, num_features or head_dim, seed=seed, orthogonal=orthogonal)
        if projection.ndim != 2 or projection.shape[1] != head_dim:
            raise ValueError(f"projection must have shape [m, K] = [m, {head_dim}], got {list(projection.shape)}")
        self.head_dim = head_dim
        self.projection = projection  # [m, K]

    def __call__(self, x):
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x must have last dim K = {self.head_dim}, got shape {list(x.shape)}")
        x = x / self.head_dim**0.25
        W = self.projection.to(device=x.device, dtype=x.dtype)  # [m, K]
        m = W.shape[0]
        logits = x @ W.T - 0.5 * (x * x).sum(-1, keepdim=True)  # [..., m]
        return torch.exp(logits) / math.sqrt(m)

    def feature_dim(self, head_dim):
        return self.projection.shape[0]

    def __repr__(self):
        return f"RandomFeatures(head_dim={self.head_dim}, num_features={self.projection.shape[0]})"


def draw_projection(head_dim: int, num_features: int, *, seed: int, orthogonal: bool) -> torch.Tensor:
    """Gaussian projection [m, K] from a private generator; orthogonal blocks when asked."""
    gen = torch.Generator().manual_seed(seed)
    if not orthogonal:
        return torch.randn(num_features, head_dim, generator=gen, dtype=torch.float64)
    blocks = []
    for _ in range(math.ceil(num_features / head_dim)):
        q, r = torch.linalg.qr(torch.randn(head_dim, head_dim, generator=gen, dtype=torch.float64))
        q = q * torch.sign(torch.diagonal(r))  # sign fix: without it Q is not Haar-distributed (Mezzadri 2007)
        blocks.append(q.T)  # rows orthonormal
    W = torch.cat(blocks)[:num_features]  # [m, K]
    norms = torch.randn(num_features, head_dim, generator=gen, dtype=torch.float64).norm(dim=1, keepdim=True)
    return W * norms


FeatureMapName = Literal["identity", "elu_plus_one", "relu", "cosine", "taylor2", "dpfp", "random_features"]
# name -> the map for head dim K, keyed by the names of FeatureMapName in its order (tests/ops/test_feature_maps.py)
FEATURE_MAPS: dict[FeatureMapName, Callable[[int], FeatureMap]] = {
    "identity": lambda K: Identity(),
    "elu_plus_one": lambda K: EluPlusOne(),
    "relu": lambda K: Relu(),
    "cosine": lambda K: Cosine(),
    "taylor2": lambda K: Taylor2(),
    "dpfp": lambda K: DPFP(),
    "random_features": lambda K: RandomFeatures(K),
}


def resolve_feature_map(feature_map: FeatureMapName | FeatureMap | Callable | None, head_dim: int) -> Callable:
    """None means identity; a name from FEATURE_MAPS; or any token-wise callable."""
    if feature_map is None:
        return Identity()
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map must be one of {sorted(FEATURE_MAPS)} or a callable, got {feature_map!r}")
        return FEATURE_MAPS[feature_map](head_dim)
    if not callable(feature_map):
        raise ValueError(f"feature_map must be a name, a callable or None, got {type(feature_map).__name__}")
    return feature_map


def map_queries_and_keys(feature_map, q: torch.Tensor, k: torch.Tensor, scale: float | None, dtype: torch.dtype):
    """phi(q) * scale and phi(k) in `dtype` for q, k: [B, T, H, K] -> [B, T, H, F] each; `scale=None` means
    K ** -0.5 (the op contract). Raises ValueError if phi does not map token-wise to one feature dim F."""
    B, T, H, K = q.shape
    phi = resolve_feature_map(feature_map, K)
    fq = phi(q.to(dtype)) * (K**-0.5 if scale is None else scale)  # [B, T, H, F]
    fk = phi(k.to(dtype))  # [B, T, H, F]
    if fq.shape[:3] != (B, T, H) or fk.shape != fq.shape:
        raise ValueError(f"feature_map must map [B, T, H, K] to [B, T, H, F], got {list(fk.shape)}")
    return fq, fk
