"""Pretrained checkpoints the tests build themselves, as a downloaded one is laid out: a
tiny randomly initialised Llama or Hugging Face Mamba saved with a byte-level BPE
tokenizer trained on the test questions. No network, no weights from anywhere."""

import json
from pathlib import Path

from tests.workloads.tasks.hotpotqa_questions import QUESTIONS


def tiny_checkpoint(folder: Path, kind: str, seed: int = 0) -> str:
    """Saves a tiny `kind` (llama or mamba) model and its tokenizer in `folder`; returns its path."""
    import torch
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    texts = [json.dumps(q) for q in QUESTIONS] + ["Question: Answer:\n\n"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=300, min_frequency=1, special_tokens=["<eos>"])
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<eos>")
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    if kind == "llama":
        config = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                          max_position_embeddings=1024, eos_token_id=tok.eos_token_id)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.MambaConfig(vocab_size=len(tok), hidden_size=32, state_size=8, num_hidden_layers=2,
                                          eos_token_id=tok.eos_token_id)
        model = transformers.MambaForCausalLM(config)
    model.save_pretrained(folder)
    return str(folder)
