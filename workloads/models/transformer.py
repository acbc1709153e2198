"""LLaMA-style decoder layer: RMSNorm pre-norm, rotary positions, causal
multi-head attention through scaled_dot_product_attention, SwiGLU MLP, no biases."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.config import ModelConfig


def rotary_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (T, head_dim) in the half-split layout LLaMA uses."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


@dataclass
class KVCache:
    """Keys and values of every position so far, preallocated to the decode length."""

    k: torch.Tensor  # (B, H, T_max, head_dim)
    v: torch.Tensor
    length: int = 0


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.theta = cfg.rope_theta
        # Separate projections: fusing them (one matmul) measured no faster on CPU,
        # and its backward adds a concatenation per layer.
        self.q_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self._rotary = None  # (cos, sin) for positions 0..T-1, computed once, grown on demand
        self.compute_dtype = None  # the attention kernel's dtype where it differs from the step's (set_attention_dtype)

    def _heads(self, x, proj):
        batch, length, _ = x.shape
        return proj(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)

    def _rotary_tables(self, start: int, end: int, like: torch.Tensor):
        cached = self._rotary
        if cached is None or cached[0].shape[0] < end or cached[0].device != like.device or cached[0].dtype != like.dtype:
            size = max(end, 256, 2 * cached[0].shape[0] if cached is not None else 0)
            cached = rotary_tables(torch.arange(size, device=like.device), self.head_dim, self.theta, like.dtype)
            self._rotary = cached
        return cached[0][start:end], cached[1][start:end]

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Causal attention over x; with a cache, x continues the cached positions."""
        batch, length, d_model = x.shape
        start = 0 if cache is None else cache.length
        cos, sin = self._rotary_tables(start, start + length, x)
        q = apply_rotary(self._heads(x, self.q_proj), cos, sin)
        k = apply_rotary(self._heads(x, self.k_proj), cos, sin)
        v = self._heads(x, self.v_proj)
        if cache is None:
            out = self._attend(q, k, v, causal=True)
        else:
            cache.k[:, :, start : start + length] = k
            cache.v[:, :, start : start + length] = v
            cache.length = start + length
            if start == 0:
                out = self._attend(q, k, v, causal=True)
            else:
                # Decoding continues after the prompt: all cached positions are visible.
                assert length == 1, "after the prompt, decode one token at a time"
                out = self._attend(q, cache.k[:, :, : cache.length], cache.v[:, :, : cache.length], causal=False)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, d_model))

    def _attend(self, q, k, v, causal: bool) -> torch.Tensor:
        """The attention kernel, in `compute_dtype` where one is set (its output back in q's dtype)."""
        dtype = self.compute_dtype
        if dtype is None or q.dtype == dtype:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=causal)
        return out.to(q.dtype)


def set_attention_dtype(model: nn.Module, dtype) -> None:
    """Every attention layer of `model` computes its kernel in `dtype` (bf16: q, k and v
    cast for the kernel alone; training.attention_precision), or in the step's own
    precision (None)."""
    for module in model.modules():
        if isinstance(module, Attention):
            module.compute_dtype = dtype


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_mlp, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_mlp, bias=False)
        self.down_proj = nn.Linear(cfg.d_mlp, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class AttentionLayer(nn.Module):
    """One LLaMA decoder layer."""

    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = SwiGLU(cfg)
        if cfg.attn_init == "normal":
            # Hugging Face LLaMA's init, as the reference's Transformer gets it:
            # every Linear from N(0, 0.02), no rescaling with depth.
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def new_cache(self, batch: int, max_length: int, like: torch.Tensor) -> KVCache:
        """Zeroed keys and values, in the dtype attention computes in (bf16 under autocast)."""
        shape = (batch, self.attn.n_heads, max_length, self.attn.head_dim)
        kind = like.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else like.dtype
        return KVCache(k=like.new_zeros(shape, dtype=dtype), v=like.new_zeros(shape, dtype=dtype))

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cache)
        return x + self.mlp(self.mlp_norm(x))
