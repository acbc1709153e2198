"""Model families (Transformer, Mamba, hybrid) as presets of one layer stack."""

from workloads.models.config import PAPER_PARAMS, PRESETS, SIZES, ModelConfig, preset
from workloads.models.lm import SequenceModel


def build_model(config: ModelConfig, vocab_size: int) -> SequenceModel:
    return SequenceModel(config, vocab_size)


__all__ = ["PAPER_PARAMS", "PRESETS", "SIZES", "ModelConfig", "SequenceModel", "build_model", "preset"]
