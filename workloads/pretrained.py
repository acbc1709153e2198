"""Pretrained causal LMs, loaded by a Hugging Face hub id or a local folder, and their
greedy answers: what the HotpotQA evaluation (workloads/tasks/hotpotqa.py) puts its
questions to.

Two loaders. `transformers`: `AutoModelForCausalLM` and `AutoTokenizer` (Phi-1.5,
Llama, Hugging Face's Mamba, ...), answers by `generate` with its cache. `phi_mamba`:
the MOHAWK-distilled Phi-Mamba and Hybrid-Phi-Mamba (goombalab/phi-mamba), loaded with
their authors' `LMHeadModel.from_pretrained` from a checkout of that repository
(`code`), which imports mamba-ssm (a CUDA host), answered by mamba-ssm's `generate`;
their tokenizer is Phi-1.5's. Nothing here downloads (a trial on a cluster's node must not
fetch gigabytes, or wait on a network it lacks): a checkpoint or tokenizer that is neither
a folder nor in the machine's Hugging Face cache is named with the command that fetches it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

Loader = Literal["transformers", "phi_mamba"]


class PretrainedModel(BaseModel):
    """A pretrained checkpoint and how to load it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arch: str = Field(description="the architecture the findings read it as: transformer, mamba, hybrid, ...")
    size: str = Field(description="its size as tables show it, e.g. 1.4B")
    checkpoint: str = Field(description="a local folder, or a Hugging Face hub id already in this machine's cache")
    tokenizer: Optional[str] = Field(None, description="where its tokenizer is (default: the checkpoint)")
    loader: Loader = Field("transformers", description="transformers: AutoModelForCausalLM; phi_mamba: the "
                           "authors' LMHeadModel of goombalab/phi-mamba (needs `code` and mamba-ssm)")
    code: Optional[str] = Field(None, description="phi_mamba: a checkout of github.com/goombalab/phi-mamba")

    @model_validator(mode="after")
    def _code_for_phi_mamba(self):
        if self.loader == "phi_mamba" and not self.code:
            raise ValueError("loader phi_mamba needs `code`: a checkout of https://github.com/goombalab/phi-mamba "
                             "(its modules/ and utils/ hold the authors' LMHeadModel)")
        if self.loader == "phi_mamba" and not self.tokenizer:
            raise ValueError("loader phi_mamba needs `tokenizer` (Phi-Mamba's is Phi-1.5's: microsoft/phi-1_5); "
                             "its checkpoints hold none")
        return self


class CheckpointMissing(FileNotFoundError):
    """A checkpoint or tokenizer not on this machine: the message says how to get it."""


def missing_message(what: str, where: str, error: Optional[Exception] = None) -> str:
    local = Path(where).expanduser()
    looks_local = where.startswith((".", "/", "~")) or local.exists()
    fetch = ("" if looks_local else
             f" Fetch it on a machine with a network: `huggingface-cli download {where} --local-dir "
             f"checkpoints/{where.split('/')[-1]}`, copy that folder here and give its path instead of {where!r} "
             f"(or set HF_HOME to a cache that holds it).")
    why = f" ({type(error).__name__}: {error})" if error is not None else ""
    return f"the {what} {where!r} is not on this machine{why}.{fetch}"


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    loader: Loader
    device: Any
    pads: bool = False  # a batch is left-padded (pads_exactly), else answered prompt by prompt

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def load(spec: PretrainedModel, device: str = "cpu", dtype: str = "fp32") -> Loaded:
    """The model in eval mode on `device` in `dtype` (fp32 or bf16), and its tokenizer;
    CheckpointMissing where either is not on the machine."""
    import torch

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    tokenizer = _tokenizer(spec.tokenizer or spec.checkpoint)
    try:
        if spec.loader == "transformers":
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(spec.checkpoint, dtype=torch_dtype, local_files_only=True)
        else:
            model = _phi_mamba(spec).to(dtype=torch_dtype)
    except OSError as e:
        raise CheckpointMissing(missing_message("checkpoint", spec.checkpoint, e)) from None
    model.to(device).eval()
    loaded = Loaded(model, tokenizer, spec.loader, torch.device(device))
    loaded.pads = pads_exactly(loaded)
    return loaded


def _tokenizer(where: str):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True)
    except OSError as e:
        raise CheckpointMissing(missing_message("tokenizer", where, e)) from None
    if tokenizer.pad_token is None:  # Phi-1.5's and Llama's have none: padding is masked out, so any id does
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # a batch's prompts end together, where generation starts
    return tokenizer


def _phi_mamba(spec: PretrainedModel):
    code = str(Path(spec.code).expanduser())
    if not (Path(code) / "modules" / "lm_head.py").is_file():
        raise CheckpointMissing(f"{code!r} is not a checkout of https://github.com/goombalab/phi-mamba (no "
                                "modules/lm_head.py): clone it and give its path as `code`")
    if code not in sys.path:
        sys.path.insert(0, code)
    from modules.lm_head import LMHeadModel  # the authors' class (it imports mamba_ssm)

    return LMHeadModel.from_pretrained(spec.checkpoint, strict=True, local_files_only=True)


def answers(loaded: Loaded, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Each prompt's greedy continuation (the decoded new tokens), up to `max_new_tokens`
    or the end of the model's text: a batch at once, left-padded under the attention
    mask, where padding was found to change nothing (`Loaded.pads`), else prompt by prompt."""
    if not loaded.pads or len(prompts) == 1:
        return [_generate(loaded, [p], max_new_tokens)[0] for p in prompts]
    return _generate(loaded, prompts, max_new_tokens)


PROBE = ("Question: which prompt is padded?\nAnswer:",
         "A longer paragraph before the question, so that the other prompt is padded.\n\n"
         "Question: which prompt is padded?\nAnswer:")


def pads_exactly(loaded: Loaded) -> bool:
    """Whether a prompt's next-token logits left-padded in a batch are its logits alone
    (to float rounding): true of a model whose forward masks padding out, false of one
    that feeds the pad tokens into its state, or the authors' Phi-Mamba (no mask)."""
    import torch

    if loaded.loader == "phi_mamba":
        return False
    short = loaded.tokenizer(PROBE[0], return_tensors="pt").to(loaded.device)
    both = loaded.tokenizer(list(PROBE), return_tensors="pt", padding=True).to(loaded.device)
    if both.input_ids.shape[1] == short.input_ids.shape[1]:
        raise ValueError("the padding probe's prompts tokenize to one length; the probe needs a padded row")
    alone, padded = (_first_logits(loaded, enc)[0] for enc in (short, both))
    dtype = next(loaded.model.parameters()).dtype
    scale = alone.abs().max().clamp_min(1.0)
    return bool(((alone - padded).abs().max() <= (2e-2 if dtype == torch.bfloat16 else 1e-4) * scale).item())


def _first_logits(loaded: Loaded, enc):
    """The logits of the first generated token, as `generate` computes them (its
    positions from the attention mask)."""
    import torch
    from transformers import GenerationConfig

    one = GenerationConfig(max_new_tokens=1, do_sample=False, num_beams=1, pad_token_id=loaded.tokenizer.pad_token_id)
    with torch.inference_mode():
        out = loaded.model.generate(**enc, generation_config=one, output_logits=True, return_dict_in_generate=True)
    return out.logits[0].float()


def _generate(loaded: Loaded, prompts: list[str], max_new_tokens: int) -> list[str]:
    import torch

    tok = loaded.tokenizer
    enc = tok(prompts, return_tensors="pt", padding=True).to(loaded.device)
    with torch.inference_mode():
        if loaded.loader == "phi_mamba":
            out = loaded.model.generate(enc.input_ids, max_length=enc.input_ids.shape[1] + max_new_tokens, top_k=1,
                                        eos_token_id=tok.eos_token_id)
            sequences = out if torch.is_tensor(out) else out.sequences
        else:
            from transformers import GenerationConfig

            # Greedy whatever the checkpoint's own generation_config says (a sampling
            # temperature, a repetition penalty would change the answers).
            greedy = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            sequences = loaded.model.generate(**enc, generation_config=greedy)
    new = sequences[:, enc.input_ids.shape[1]:]
    return tok.batch_decode(new, skip_special_tokens=True)
