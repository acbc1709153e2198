"""Gated DeltaNet-2 layer (flash-linear-attention's `GatedDeltaNet2`, "Gated
DeltaNet-2: Decoupling Erase and Write in Linear Attention"): Kimi Delta
Attention's layer (kda/layer.py) whose one beta per head becomes two gates,

    S_t = (I - k_t (b_t * k_t)^T) diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T,

b_t = sigmoid(b_proj x_t) per key channel (what k_t erases) and w_t =
sigmoid(w_proj x_t) per value channel (what it writes): the channel-wise delta rule
(workloads/models/channel_delta_rule.py) with erase key b_t * k_t and write value
w_t * v_t. b = w = beta is Kimi Delta Attention.
"""

import torch

from workloads.models.kda.layer import KimiDeltaAttentionMixer


class GatedDeltaNet2Mixer(KimiDeltaAttentionMixer):
    """`scan`: auto (fla's kernel on CUDA where it imports; the chunked form
    otherwise), chunked, or recurrent (the step-by-step reference)."""

    KERNEL = ("fla.ops.gdn2", "chunk_gdn2")

    def gate_widths(self) -> list[int]:
        """The erase gate's projection (per key channel) and the write gate's (per value channel)."""
        return [self.key_dim, self.value_dim]

    def _gated(self, b: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.sigmoid(b).unflatten(-1, (self.n_heads, -1)), torch.sigmoid(w).unflatten(-1, (self.n_heads, -1))

    def _delta(self, k, v, b, w):
        return b * k, w * v
