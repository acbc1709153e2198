"""A gated linear recurrence, the complete example of docs/extending.md: copy this
folder to workloads/models/glr/ and `glr` and `glr_hybrid` are architectures that
specs, `train`, `models`, the memory estimate and the report know.

This file is the mixer's config and registration, and imports no torch: the CLI
reads specs, parameter counts and state sizes without it. The torch layer is
layer.py beside it, imported only when a model is built."""

from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer


class GLRConfig(MixerConfigBase):
    """h_t = sigmoid(decay) * h_(t-1) + W_in x_t, y_t = W_out h_t, per channel of
    `width`. Its fields other than `name` are the layer's keyword arguments, and
    the integer ones are what a spec's `axes.model` may sweep (`width: [8, 16]`)."""

    layer: ClassVar[str] = "workloads.models.glr.layer:GLRMixer"  # "module:Class", imported on build
    cpu_cost: ClassVar[float] = 1.0  # a training step on CPU against attention's, for scheduling

    name: Literal["glr"] = "glr"  # the discriminator: a spec's model.mixer.name
    width: int = Field(16, gt=0, description="channels of the recurrent state")

    def params(self, d_model: int) -> int:
        """Trainable parameters of the layer it builds (a test builds it and counts)."""
        return 2 * d_model * self.width + 2 * self.width + d_model  # W_in and b, W_out and b, decay

    def state_floats(self, d_model: int) -> int:
        """Floats the layer carries per sequence from one token to the next: its
        cache's tensors for a batch of one (what `icr-sweep models` and the
        frontier plot call the state)."""
        return self.width

    def activation_floats(self, d_model: int) -> float:
        """Floats it keeps per token for the backward pass (the memory estimate)."""
        return 3 * self.width


# A preset for each size; a paper size's (0.5M, 1M, 2M) must hold its label's
# trainable parameters within 1.2x, as the paper's own presets do (the registry
# checks at import). Stack(d_model, recurrent layers, ...).
PRESETS = {"tiny": Stack(32, 2), "0.5M": Stack(256, 2, mixer=GLRConfig(width=512)),
           "1M": Stack(256, 4, mixer=GLRConfig(width=512)), "2M": Stack(256, 8, mixer=GLRConfig(width=512))}
# The hybrid: the same recurrent stack with one LLaMA attention layer on top (its
# MLP width and heads are the Stack's d_mlp and n_heads).
HYBRID = {"tiny": Stack(32, 1, d_mlp=64, n_heads=2), "0.5M": Stack(128, 1, mixer=GLRConfig(width=1024)),
          "1M": Stack(128, 3, mixer=GLRConfig(width=1024)), "2M": Stack(128, 7, mixer=GLRConfig(width=1024))}
register_mixer(GLRConfig, arch="glr", hybrid="glr_hybrid", lr=2e-3, presets=PRESETS, hybrid_presets=HYBRID)
