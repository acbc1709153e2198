"""The language model around the layers: frozen sinusoidal embedding shared with the
output head, a stack of attention and recurrent layers (the config's `layers`), and
a final RMSNorm placed by the config's layout rule (after the recurrent stack in a
hybrid, at the end otherwise)."""

from dataclasses import dataclass

import torch
from torch import nn

from workloads.models.config import ModelConfig
from workloads.models.transformer import AttentionLayer


def sinusoidal_table(vocab_size: int, d_model: int) -> torch.Tensor:
    """Row i, column j: sin(i / 10000^(j/d)) for even j, cos(i / 10000^((j-1)/d)) for odd j."""
    i = torch.arange(vocab_size, dtype=torch.float64)[:, None]
    j = torch.arange(d_model, dtype=torch.float64)[None, :]
    angle = i / 10000 ** ((j - j % 2) / d_model)
    return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).to(torch.float32)


class RecurrentLayer(nn.Module):
    """Pre-norm residual layer of the config's recurrent mixer (no MLP, as in
    mamba-ssm's MixerModel)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        depth = cfg.layers[:layer_idx].count(cfg.mixer.name)  # its place among the recurrent layers
        self.mixer = cfg.mixer.build(cfg.d_model, cfg.n_recurrent_layers, cfg.norm_eps, depth)

    def new_cache(self, batch: int, max_length: int, like: torch.Tensor):
        return self.mixer.new_cache(batch, like)

    def forward(self, x: torch.Tensor, cache=None) -> torch.Tensor:
        return x + self.mixer(self.norm(x), cache)


@dataclass
class DecodeState:
    layers: list
    length: int = 0


class SequenceModel(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        # Frozen so that the parameter count does not grow with the vocabulary (docs/experiment.md).
        self.register_buffer("embedding", sinusoidal_table(vocab_size, cfg.d_model), persistent=False)
        self.layers = nn.ModuleList(
            AttentionLayer(cfg, i) if kind == "attention" else RecurrentLayer(cfg, i) for i, kind in enumerate(cfg.layers)
        )
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def _hidden(self, h: torch.Tensor, caches=None) -> torch.Tensor:
        """The layers and the final norm, in the config's layout."""
        caches = caches or [None] * len(self.layers)
        for i, (layer, cache) in enumerate(zip(self.layers, caches)):
            if i == self.cfg.norm_idx:
                h = self.norm(h)
            h = layer(h, cache)
        if self.cfg.norm_idx == len(self.layers):
            h = self.norm(h)
        return h

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.embedding.T.to(h.dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) for tokens (B, T): position t predicts token t+1."""
        return self._logits(self._hidden(self.embedding[tokens]))

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, max_length: int) -> tuple[torch.Tensor, DecodeState]:
        """Runs the prompt (B, T) once; returns the last position's logits (B, V) and
        the state that `step` continues from, sized for `max_length` tokens in all."""
        h = self.embedding[tokens]
        state = DecodeState([layer.new_cache(tokens.shape[0], max_length, h) for layer in self.layers])
        h = self._hidden(h, state.layers)
        state.length = tokens.shape[1]
        return self._logits(h[:, -1]), state

    @torch.no_grad()
    def step(self, token: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Feeds one token per row (B,); returns the next logits (B, V)."""
        h = self._hidden(self.embedding[token][:, None], state.layers)
        state.length += 1
        return self._logits(h[:, 0])
