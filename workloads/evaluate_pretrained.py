"""One evaluation of a pretrained model on HotpotQA under one condition: the
counterpart of `run_trial` for a model that is not trained (workloads/tasks/hotpotqa.py,
workloads/pretrained.py).

Its answers go to a JSONL file as each batch ends (one line a question: its id, the
model's answer, its exact match and F1), so an evaluation stopped or killed continues
from the questions answered, none twice; the run's subset rule (the questions every
model answers given the gold paragraphs) reads these files across evaluations."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from workloads.pretrained import PretrainedModel
from workloads.tasks.hotpotqa import HotpotQAConfig, answer_of, exact_match, f1, prompt, read_questions

ANSWERS_FILE = "answers.jsonl"
MODEL_FILE = "model.json"  # beside the answers: the model's parameter count, as loaded (findings compare at equal size)


class EvalSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: int = Field(8, ge=1, le=4096, description="questions answered at once (an attention model; "
                            "a recurrent one answers one by one)")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16"] = Field("bf16", description="the weights' dtype on a GPU (a CPU runs fp32)")
    report_every: int = Field(256, ge=1, description="questions between progress rows")


class EvaluationConfig(BaseModel):
    """One evaluation: a pretrained model, the questions and their condition, how it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: HotpotQAConfig
    model: PretrainedModel
    eval: EvalSettings = EvalSettings()

    @property
    def setup(self) -> str:
        return self.task.setup

    @property
    def name(self) -> str:
        """hotpotqa-transformer-gold-1.4B-n350: the task, the model, the condition, the questions."""
        m = self.model
        return f"{self.task.name}-{m.arch}-{self.task.setup}-{m.size}-n{self.task.n}"


def read_answers(path: Path) -> dict[str, dict]:
    """The answers a file holds, by question id; a last line cut short by a kill is
    dropped (its question is answered again)."""
    out = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[record["id"]] = record
    return out


def model_params(folder: Path) -> Optional[int]:
    """The parameter count an evaluation's folder records of its model (None: not loaded yet)."""
    try:
        return int(json.loads((Path(folder) / MODEL_FILE).read_text())["params"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cut_partial_line(path: Path) -> None:
    """Drops a last line a kill cut short, which the next append would run into."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _append(path: Path, records: list[dict]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
        f.flush()
        os.fsync(f.fileno())


def run_evaluation(config: dict | EvaluationConfig, answers_dir: Path,
                   report: Optional[Callable[[dict], None]] = None,
                   stop: Optional[Callable[[], bool]] = None) -> dict:
    """Answers the questions not yet in `answers_dir`'s answers file, batch by batch,
    and returns the metrics over all of them: exact_match and f1 (means), questions
    (answered), stopped (a `stop()` request ended it first). `report(row)` hears a
    progress row every `report_every` questions and the last row."""
    import torch

    from workloads.pretrained import answers, load

    config = EvaluationConfig.model_validate(config)
    questions = read_questions(config.task.data, config.task.n)
    path = Path(answers_dir) / ANSWERS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    _cut_partial_line(path)
    done = read_answers(path)
    todo = [q for q in questions if q.id not in done]
    device = config.eval.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    loaded = load(config.model, device, config.eval.precision if device == "cuda" else "fp32") if todo else None
    if loaded is not None:
        (path.parent / MODEL_FILE).write_text(json.dumps({"params": loaded.params}))
    params = model_params(path.parent)
    told = len(done)
    stopped = False
    for start in range(0, len(todo), config.eval.batch_size):
        if stop is not None and stop():
            stopped = True
            break
        batch = todo[start:start + config.eval.batch_size]
        said = [answer_of(text) for text in
                answers(loaded, [prompt(q, config.task.setup) for q in batch], config.task.max_answer_tokens)]
        records = [{"id": q.id, "prediction": a, "exact_match": exact_match(a, q.answer), "f1": f1(a, q.answer)}
                   for q, a in zip(batch, said)]
        _append(path, records)
        done.update((r["id"], r) for r in records)
        if report is not None and len(done) - told >= config.eval.report_every and len(done) < len(questions):
            report(_row(config, done, evaluated=False, params=params))
            told = len(done)
    row = _row(config, done, evaluated=not stopped, params=params, stopped=stopped)
    if report is not None:
        report(row)
    return row


def _row(config: EvaluationConfig, done: dict, evaluated: bool, params: Optional[int], stopped: bool = False) -> dict:
    count = len(done)
    em = sum(r["exact_match"] for r in done.values())
    return {"samples": count, "questions": count, "exact_match": em / count if count else math.nan,
            "exact_matches": int(em), "f1": sum(r["f1"] for r in done.values()) / count if count else math.nan,
            "evaluated": evaluated, "stopped": stopped, "params": params}
