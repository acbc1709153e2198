"""Model families (Transformer, Mamba, hybrid) as presets of one layer stack.

Importing this package loads only the configs: torch is imported when a model is
built, so that the CLI and spec validation start instantly.
"""

from workloads.models.config import PAPER_PARAMS, PRESETS, SIZES, ModelConfig, preset


def build_model(config: ModelConfig, vocab_size: int):
    """A `SequenceModel` (workloads.models.lm) for `config`."""
    from workloads.models.lm import SequenceModel

    return SequenceModel(config, vocab_size)


__all__ = ["PAPER_PARAMS", "PRESETS", "SIZES", "ModelConfig", "build_model", "preset"]
