"""HotpotQA's conditions, its data layouts, the official scoring rules and the paper's subset."""

import pytest
from pydantic import ValidationError

from tests.workloads.tasks.hotpotqa_questions import QUESTIONS, hub_file, official_file
from workloads.tasks.hotpotqa import (CONDITIONS, OFFICIAL_URL, DataMissing, HotpotQAConfig, answer_of,
                                      answerable_by_all, exact_match, f1, normalize_answer, prompt, read_questions,
                                      scored)


@pytest.mark.parametrize(("prediction", "truth", "em", "f"), [
    ("The Ostrava.", "Ostrava", True, 1.0),  # article, punctuation, case
    ("ostrava  city", "Ostrava", False, 2 * 0.5 * 1 / 1.5),  # precision 1/2, recall 1
    ("in Ostrava", "Ostrava, Czech Republic", False, 2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3)),
    ("Yes", "yes", True, 1.0),
    ("yes it is", "yes", False, 0.0),  # a yes/no answer scores only whole
    ("no", "no way", False, 0.0),
    ("Paris Paris", "Paris", False, 2 * 0.5 * 1 / 1.5),  # tokens counted with their multiplicity
    ("", "Ostrava", False, 0.0),
    ("a an the", "", True, 0.0),  # both empty once normalised: equal, yet no token in common
])
def test_exact_match_and_f1_follow_the_official_rules(prediction, truth, em, f):
    assert exact_match(prediction, truth) is em
    assert f1(prediction, truth) == pytest.approx(f)


def test_normalisation_drops_case_punctuation_articles_and_spacing():
    assert normalize_answer("  The  Lantern-Hall, an  Apple!") == "lanternhall apple"
    assert normalize_answer("theatre") == "theatre"  # "the" only as a word


def test_the_official_and_the_hub_layouts_read_the_same_questions(tmp_path):
    a = read_questions(official_file(tmp_path / "dev.json"))
    b = read_questions(hub_file(tmp_path / "dev.jsonl"))
    assert a == b and [q.id for q in a] == [q["_id"] for q in QUESTIONS]
    assert read_questions(official_file(tmp_path / "dev.json"), 2) == a[:2]


def test_each_condition_holds_its_paragraphs_in_the_data_sets_order(tmp_path):
    for q in read_questions(official_file(tmp_path / "dev.json")):
        titles = [t for t, _ in q.paragraphs]
        gold = [t for t in titles if t in q.gold_titles]
        assert len(gold) == 2
        assert [t for t, _ in q.context("gold")] == gold
        assert [t for t, _ in q.context("distractors")] == [t for t in titles if t not in q.gold_titles]
        assert [t for t, _ in q.context("gold_distractors")] == titles
        assert q.context("closed_book") == []
        for setup in CONDITIONS:
            text = prompt(q, setup)
            assert text.endswith(f"Question: {q.question}\nAnswer:")
            for title, sentences in q.paragraphs:
                shown = f"{title}: {''.join(sentences)}" in text
                assert shown == (title in [t for t, _ in q.context(setup)]), (setup, title)
        if q.answer not in ("yes", "no"):  # the answer is in the gold paragraphs, not in the distractors
            assert q.answer in prompt(q, "gold") and q.answer not in prompt(q, "distractors")


def test_an_answer_is_the_first_line_of_the_continuation():
    assert answer_of(" Ostrava\nQuestion: next") == "Ostrava"
    assert answer_of("\n\nOstrava") == "Ostrava"
    assert answer_of("") == ""


def test_the_subset_is_the_questions_every_model_answers_given_the_gold_paragraphs():
    gold = {"transformer": {"a": True, "b": True, "c": False, "d": True},
            "mamba": {"a": True, "b": False, "c": True, "d": True},
            "hybrid": {"a": True, "b": True, "c": True}}  # never asked d
    assert answerable_by_all(gold) == ["a"]
    assert answerable_by_all({"transformer": gold["transformer"]}) == ["a", "b", "d"]
    assert answerable_by_all({}) == []


def test_scores_are_means_over_the_questions_answered(tmp_path):
    questions = read_questions(official_file(tmp_path / "dev.json"))
    s = scored(questions, {"q-bridge": "Ostrava", "q-compare": "yes"})
    assert s == {"exact_match": 0.5, "f1": 0.5, "questions": 2}


def test_a_missing_data_set_names_where_to_get_it(tmp_path):
    with pytest.raises(DataMissing) as e:
        read_questions(str(tmp_path / "nowhere.json"))
    assert OFFICIAL_URL in str(e.value) and "nowhere.json" in str(e.value)


def test_a_file_that_is_not_hotpotqa_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"question": "q", "answer": "a"}]')
    with pytest.raises(ValueError, match="record 0 is not a HotpotQA question"):
        read_questions(str(bad))
    with pytest.raises(ValueError, match="holds 3 questions; the task asks for n = 5"):
        read_questions(official_file(tmp_path / "dev.json"), 5)


def test_the_config_names_a_bad_condition_and_size():
    with pytest.raises(ValidationError, match="closed_book"):
        HotpotQAConfig(n=10, setup="open_book")
    with pytest.raises(ValidationError, match="less than or equal to 7405"):
        HotpotQAConfig(n=10_000)
