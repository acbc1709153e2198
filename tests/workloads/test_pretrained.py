"""Pretrained models as the HotpotQA evaluation loads and asks them, on checkpoints the
tests build themselves (a tiny randomly initialised Llama and Hugging Face Mamba, a
byte-level BPE tokenizer trained on the test questions), saved to a folder and loaded
through the same path as a downloaded one; no network."""

import json

import pytest
import torch

from tests.workloads.tasks.hotpotqa_questions import QUESTIONS, official_file
from tests.workloads.tiny_checkpoints import tiny_checkpoint
from workloads.evaluate_pretrained import ANSWERS_FILE, EvaluationConfig, read_answers, run_evaluation
from workloads.pretrained import CheckpointMissing, PretrainedModel, answers, load, pads_exactly
from workloads.tasks.hotpotqa import answer_of, exact_match, f1, prompt, read_questions


@pytest.fixture(scope="module", params=["llama", "mamba"])
def checkpoint(request, tmp_path_factory):
    """A tiny model of each kind, saved with its tokenizer as a checkpoint folder."""
    return request.param, tiny_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


def _spec(kind, folder):
    return PretrainedModel(arch="transformer" if kind == "llama" else "mamba", size="tiny", checkpoint=folder)


def _greedy_by_hand(loaded, text, new):
    """Greedy decoding without a cache: the whole sequence through the model at every step."""
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids
    start = ids.shape[1]
    with torch.no_grad():
        for _ in range(new):
            nxt = loaded.model(ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
            if nxt.item() == loaded.tokenizer.eos_token_id:
                break
    return loaded.tokenizer.decode(ids[0, start:], skip_special_tokens=True)


def test_an_answer_is_the_greedy_continuation_a_full_forward_gives(checkpoint, tmp_path):
    kind, folder = checkpoint
    loaded = load(_spec(kind, folder))
    texts = [prompt(q, "gold") for q in read_questions(official_file(tmp_path / "dev.json"))]
    said = answers(loaded, texts, 12)
    assert said == [_greedy_by_hand(loaded, t, 12) for t in texts]
    assert any(s.strip() for s in said)  # the model wrote something: the comparison is not of empty strings


def test_a_batch_gives_each_prompt_what_it_gives_alone(checkpoint, tmp_path):
    kind, folder = checkpoint
    loaded = load(_spec(kind, folder))
    texts = [prompt(q, s) for q in read_questions(official_file(tmp_path / "dev.json"))
             for s in ("closed_book", "gold_distractors")]  # prompts of very different lengths
    assert len({len(loaded.tokenizer(t).input_ids) for t in texts}) == len(texts)
    assert answers(loaded, texts, 8) == [answers(loaded, [t], 8)[0] for t in texts]


def test_only_a_model_that_masks_padding_out_answers_a_padded_batch(checkpoint, monkeypatch):
    kind, folder = checkpoint
    loaded = load(_spec(kind, folder))
    assert loaded.pads  # both read the attention mask
    forward = loaded.model.forward
    monkeypatch.setattr(loaded.model, "forward", lambda *a, attention_mask=None, **k: forward(*a, **k))
    assert not pads_exactly(loaded)  # the same model blind to the mask: its pads change its logits


def _config(kind, folder, data, setup="gold", n=3, batch_size=2):
    return EvaluationConfig.model_validate({
        "task": {"n": n, "setup": setup, "data": data, "max_answer_tokens": 6},
        "model": _spec(kind, folder).model_dump(),
        "eval": {"batch_size": batch_size, "device": "cpu", "report_every": 1}})


def test_an_evaluation_scores_every_question_by_the_official_rules(checkpoint, tmp_path):
    kind, folder = checkpoint
    data = official_file(tmp_path / "dev.json")
    rows = []
    metrics = run_evaluation(_config(kind, folder, data), tmp_path / "out", report=rows.append)
    records = read_answers(tmp_path / "out" / ANSWERS_FILE)
    questions = read_questions(data)
    assert list(records) == [q["_id"] for q in QUESTIONS]
    loaded = load(_spec(kind, folder))
    for q in questions:
        r = records[q.id]
        assert r["prediction"] == answer_of(answers(loaded, [prompt(q, "gold")], 6)[0])
        assert r["exact_match"] == exact_match(r["prediction"], q.answer) and r["f1"] == f1(r["prediction"], q.answer)
    assert metrics["questions"] == 3 and metrics["evaluated"] and not metrics["stopped"]
    assert metrics["exact_match"] == sum(r["exact_match"] for r in records.values()) / 3
    assert metrics["params"] == loaded.params
    assert rows[-1] == metrics and [r["questions"] for r in rows[:-1]] == [2]  # a progress row after each batch


def test_a_stopped_evaluation_continues_where_it_stopped_and_answers_none_twice(checkpoint, tmp_path):
    kind, folder = checkpoint
    data = official_file(tmp_path / "dev.json")
    config = _config(kind, folder, data, setup="gold_distractors", batch_size=1)
    straight = run_evaluation(config, tmp_path / "straight")
    asked = iter([False, True])
    first = run_evaluation(config, tmp_path / "stopped", stop=lambda: next(asked, True))
    assert first["stopped"] and not first["evaluated"] and first["questions"] == 1
    # A kill while a batch was being written leaves half a line: it is answered again.
    with open(tmp_path / "stopped" / ANSWERS_FILE, "a") as f:
        f.write('{"id": "q-compare", "predic')
    resumed = run_evaluation(config, tmp_path / "stopped")
    assert resumed == straight
    lines = (tmp_path / "stopped" / ANSWERS_FILE).read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines if line.endswith("}")]
    assert ids == [q["_id"] for q in QUESTIONS]
    assert read_answers(tmp_path / "stopped" / ANSWERS_FILE) == read_answers(tmp_path / "straight" / ANSWERS_FILE)


def test_a_checkpoint_not_on_the_machine_is_named_with_how_to_fetch_it(tmp_path):
    with pytest.raises(CheckpointMissing) as e:
        load(PretrainedModel(arch="transformer", size="1.4B", checkpoint="microsoft/phi-1_5"))
    assert "huggingface-cli download microsoft/phi-1_5 --local-dir" in str(e.value)
    with pytest.raises(CheckpointMissing, match="not on this machine"):
        load(PretrainedModel(arch="transformer", size="1.4B", checkpoint=str(tmp_path / "absent")))


def test_phi_mamba_needs_the_authors_code_and_phis_tokenizer(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="goombalab/phi-mamba"):
        PretrainedModel(arch="mamba", size="1.5B", checkpoint="goombalab/Phi-Mamba", loader="phi_mamba",
                        tokenizer="microsoft/phi-1_5")
    with pytest.raises(ValidationError, match="microsoft/phi-1_5"):
        PretrainedModel(arch="mamba", size="1.5B", checkpoint="goombalab/Phi-Mamba", loader="phi_mamba",
                        code=str(tmp_path))


@pytest.mark.gpu
def test_the_authors_phi_mamba_loads_and_answers_greedily(tmp_path):
    """Needs a CUDA host with mamba-ssm, a checkout of goombalab/phi-mamba at
    $ICR_PHI_MAMBA_CODE and Phi-Mamba's and Phi-1.5's checkpoints in the machine's cache."""
    import os

    code = os.environ.get("ICR_PHI_MAMBA_CODE")
    if not torch.cuda.is_available() or not code:
        pytest.skip("needs a GPU and ICR_PHI_MAMBA_CODE (a checkout of goombalab/phi-mamba)")
    spec = PretrainedModel(arch="mamba", size="1.5B", checkpoint="goombalab/Phi-Mamba", loader="phi_mamba",
                           tokenizer="microsoft/phi-1_5", code=code)
    loaded = load(spec, "cuda", "bf16")
    text = prompt(read_questions(official_file(tmp_path / "dev.json"))[0], "gold")
    said = answers(loaded, [text], 8)[0]
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids.cuda()
    with torch.no_grad():
        first = loaded.model(ids).logits[0, -1].argmax().item()
    assert loaded.tokenizer(said, add_special_tokens=False).input_ids[:1] in ([first], [])
