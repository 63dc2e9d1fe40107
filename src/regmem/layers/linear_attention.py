"""LinearAttention: uniform weights, (feature-mapped) linear regressor, one GD step (TTR eq. 2-3, 24).

The feature map is applied here, so that padded keys can be zeroed after it (phi(0) != 0 for most maps); the
op then runs on features. The Katharopoulos normaliser is replaced by the per-head output RMSNorm (TTR Sec. 5,
TransNormer), as the TTR paper and fla's LinearAttention do.
"""

from __future__ import annotations

from collections.abc import Callable

from regmem.layers.memory import MemoryMixer
from regmem.ops import linear_attn
from regmem.ops.common import zero_padding
from regmem.ops.feature_maps import FeatureMapName, resolve_feature_map


class LinearAttention(MemoryMixer):
    recipe_name = "linear_attn"

    def __init__(self, d_model: int, n_heads: int, *, feature_map: FeatureMapName | Callable | None = None,
                 **memory_kwargs):
        super().__init__(d_model, n_heads, **memory_kwargs)
        self.recipe_name = "linear_attn" if feature_map in (None, "identity") else "feature_linear_attn"
        self.feature_map = resolve_feature_map(feature_map, self.key_dim)  # a name from FEATURE_MAPS, or None
        self.feature_dim = self.feature_map.feature_dim(self.key_dim)

    def memory(self, x, q, k, v, mask, memory, mode):
        phi_q, phi_k = self.feature_map(q), zero_padding(self.feature_map(k), mask)  # [B, T, H, F]
        return linear_attn(
            phi_q, phi_k, v, scale=self.key_dim**-0.5, initial_state=memory, output_final_state=True,
            mode=mode, chunk_size=self.chunk_size,
        )

    def memory_floats(self) -> int:
        return self.n_heads * self.feature_dim * self.value_dim
