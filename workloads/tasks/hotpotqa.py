"""HotpotQA (Yang et al., 2018) as an evaluation of pretrained causal LMs: the paper's
natural-language check of its claim (docs/experiment.md, "The natural-language check").

Nothing here trains. Each question of the data set's validation split (the distractor
setting: two gold paragraphs among eight distractors) is put to a model under one of
four conditions, which separate retrieving from reasoning:

- `closed_book`: the question alone (what the model knows without the context);
- `gold`: the two gold paragraphs, then the question (reasoning, no search);
- `gold_distractors`: all ten paragraphs in the data set's order (search in a long context);
- `distractors`: the eight distractors alone (the answer is not there).

The model's answer is its greedy continuation of the prompt up to its first line
break, scored by HotpotQA's official rules (`exact_match`, `f1`: the rules of
hotpot_evaluate_v1.py, our code). The paper scores "a subset of 350 samples of the
validation set where all the models can answer correctly given the correct
paragraphs": `answerable_by_all` computes that subset from a run itself. The prompt is
ours: the paper's could not be read (docs/experiment.md says what is known).

This module imports nothing heavy: the CLI reads a spec without torch or transformers.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

CONDITIONS = ("closed_book", "gold", "gold_distractors", "distractors")
CONDITION_WORDS = {"closed_book": "the question alone", "gold": "the gold paragraphs",
                   "gold_distractors": "the gold paragraphs among the distractors",
                   "distractors": "the distractors alone"}
# The official validation file of the distractor setting (7,405 questions), and the
# Hugging Face data set that holds the same questions.
OFFICIAL_FILE = "hotpot_dev_distractor_v1.json"
OFFICIAL_URL = f"http://curtis.ml.cmu.edu/datasets/hotpot/{OFFICIAL_FILE}"
HUB_DATASET = "hotpotqa/hotpot_qa"
VALIDATION_QUESTIONS = 7405


class HotpotQAConfig(BaseModel):
    """Which questions, under which condition, and how the prompt is cut."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["hotpotqa"] = "hotpotqa"
    n: int = Field(ge=1, le=VALIDATION_QUESTIONS,
                   description="validation questions evaluated: the data set's first n, in its order")
    setup: Literal[CONDITIONS] = Field("gold_distractors", description="what the prompt holds before the question")
    data: str = Field(OFFICIAL_FILE, description=f"the distractor setting's validation set: the official JSON "
                      f"({OFFICIAL_FILE}) or a JSON/JSONL file in the Hugging Face layout ({HUB_DATASET})")
    max_answer_tokens: int = Field(32, ge=1, le=512, description="the most tokens generated for an answer")


@dataclass(frozen=True)
class Question:
    """One validation question: its paragraphs as (title, sentences), in the data set's
    order, and the titles of the two that hold its supporting facts."""

    id: str
    question: str
    answer: str
    paragraphs: tuple[tuple[str, tuple[str, ...]], ...]
    gold_titles: frozenset[str]
    kind: str = ""  # bridge or comparison
    level: str = ""  # easy, medium, hard

    def context(self, setup: str) -> list[tuple[str, tuple[str, ...]]]:
        """The paragraphs `setup` puts before the question, in the data set's order."""
        if setup == "closed_book":
            return []
        if setup == "gold_distractors":
            return list(self.paragraphs)
        gold = setup == "gold"
        return [p for p in self.paragraphs if (p[0] in self.gold_titles) == gold]


def prompt(q: Question, setup: str) -> str:
    """The text the model continues: each paragraph as its title and its sentences, then
    the question and "Answer:". The model's answer is what follows, to its first line break."""
    parts = [f"{title}: {''.join(sentences).strip()}" for title, sentences in q.context(setup)]
    parts.append(f"Question: {q.question.strip()}\nAnswer:")
    return "\n\n".join(parts)


def answer_of(continuation: str) -> str:
    """The answer in a model's continuation: its first line, stripped."""
    return continuation.strip().split("\n", 1)[0].strip()


# ---------------------------------------------------------------- HotpotQA's scoring rules

PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, without punctuation, the articles a, an and the, or repeated white
    space (the official script's normalisation)."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(truth)


YES_NO = ("yes", "no", "noanswer")  # answers the official F1 scores only whole


def f1(prediction: str, truth: str) -> float:
    """Token F1 of the normalised answers; where either is yes, no or noanswer, 1 if
    they are equal and 0 otherwise (the official script's rule)."""
    p, t = normalize_answer(prediction), normalize_answer(truth)
    if (p in YES_NO or t in YES_NO) and p != t:
        return 0.0
    common = Counter(p.split()) & Counter(t.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p.split()), same / len(t.split())
    return 2 * precision * recall / (precision + recall)


def answerable_by_all(correct: Mapping[str, Mapping[str, bool]]) -> list[str]:
    """The questions every model answers exactly given the gold paragraphs (the paper's
    subset): `correct` holds, per model, each question's exact match under `gold`. A
    question some model was not asked is not in it. In the order of the first model's."""
    if not correct:
        return []
    models = list(correct.values())
    return [q for q in models[0] if all(m.get(q) is True for m in models)]


# ---------------------------------------------------------------- reading the data set

class DataMissing(FileNotFoundError):
    """The data set is not where the config says: the message says what to download and where."""


def missing_data_message(data: str) -> str:
    return (f"HotpotQA's validation set is not at {data!r}. Download the distractor setting's validation file "
            f"({OFFICIAL_URL}, 7,405 questions, 45 MB) and put it there, or give its path as the task's `data` "
            f"(task_params: {{data: /path/to/{OFFICIAL_FILE}}}). A copy in the Hugging Face layout works too: "
            f"`python -c \"import datasets; datasets.load_dataset('{HUB_DATASET}', 'distractor', split='validation')"
            f".to_json('hotpotqa_validation.jsonl')\"` on a machine with a network.")


def read_questions(data: str, n: Optional[int] = None) -> list[Question]:
    """The first `n` questions (all: None) of the validation set at `data`: the official
    JSON (a list of records whose `context` is [[title, [sentences]], ...]) or JSON/JSONL
    in the Hugging Face layout (`context`: {title: [...], sentences: [[...], ...]})."""
    path = Path(data).expanduser()
    if not path.is_file():
        raise DataMissing(missing_data_message(data))
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        records = json.loads(text)
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    out = []
    for i, record in enumerate(records[:n] if n is not None else records):
        try:
            out.append(_question(record))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{data}: record {i} is not a HotpotQA question ({type(e).__name__}: {e}); expected "
                             f"the official layout ({OFFICIAL_FILE}) or {HUB_DATASET}'s") from None
    if n is not None and len(out) < n:
        raise ValueError(f"{data} holds {len(out)} questions; the task asks for n = {n}")
    return out


def _question(r: dict) -> Question:
    context, facts = r["context"], r["supporting_facts"]
    if isinstance(context, dict):  # Hugging Face's layout
        paragraphs = tuple((t, tuple(s)) for t, s in zip(context["title"], context["sentences"], strict=True))
        gold = frozenset(facts["title"])
    else:
        paragraphs = tuple((t, tuple(s)) for t, s in context)
        gold = frozenset(title for title, _ in facts)
    if not gold <= {t for t, _ in paragraphs}:
        raise ValueError(f"supporting facts name {sorted(gold - {t for t, _ in paragraphs})}, not in its context")
    return Question(id=str(r.get("_id", r.get("id"))), question=r["question"], answer=r["answer"],
                    paragraphs=paragraphs, gold_titles=gold, kind=r.get("type", ""), level=r.get("level", ""))


def scored(questions: Iterable[Question], predictions: Mapping[str, str]) -> dict[str, float]:
    """Exact match and F1 over the questions predicted (means), with their count."""
    em = f = 0.0
    count = 0
    for q in questions:
        if q.id in predictions:
            em += exact_match(predictions[q.id], q.answer)
            f += f1(predictions[q.id], q.answer)
            count += 1
    return {"exact_match": em / count if count else float("nan"), "f1": f / count if count else float("nan"),
            "questions": count}
