"""A handful of questions in HotpotQA's layout, written for the tests (not the data set's):
two gold paragraphs and two distractors each, the gold ones not first, sentences after
the first starting with a space as in the data set."""

import json

QUESTIONS = [
    {"_id": "q-bridge", "question": "In which city was the architect of the Lantern Hall born?", "answer": "Ostrava",
     "type": "bridge", "level": "medium",
     "supporting_facts": [["Lantern Hall", 0], ["Mara Kessel", 1]],
     "context": [["Old Mill", ["The Old Mill stands by the river.", " It was built in 1820."]],
                 ["Lantern Hall", ["Lantern Hall was designed by Mara Kessel.", " It opened in 1931."]],
                 ["Blue Lake", ["Blue Lake is a reservoir.", " It feeds the Old Mill."]],
                 ["Mara Kessel", ["Mara Kessel was an architect.", " She was born in Ostrava."]]]},
    {"_id": "q-compare", "question": "Are the Old Bridge and the New Tower in the same country?", "answer": "no",
     "type": "comparison", "level": "hard",
     "supporting_facts": [["Old Bridge", 0], ["New Tower", 0]],
     "context": [["Green Park", ["Green Park is a park.", " Deer live there."]],
                 ["Old Bridge", ["The Old Bridge is in Portugal."]],
                 ["New Tower", ["The New Tower is in Chile.", " It is 300 m tall."]],
                 ["Red Hill", ["Red Hill is a hill."]]]},
    {"_id": "q-year", "question": "When did the author of Night Rivers die?", "answer": "1974",
     "type": "bridge", "level": "easy",
     "supporting_facts": [["Night Rivers", 0], ["Ivo Marek", 0]],
     "context": [["Ivo Marek", ["Ivo Marek was a poet who died in 1974."]],
                 ["Stone Gate", ["Stone Gate is a gate."]],
                 ["Night Rivers", ["Night Rivers is a novel by Ivo Marek."]],
                 ["Salt Road", ["The Salt Road crossed the hills.", " Traders used it."]]]},
]


def official_file(path) -> str:
    """The questions as the official JSON (hotpot_dev_distractor_v1.json's layout)."""
    path.write_text(json.dumps(QUESTIONS))
    return str(path)


def hub_file(path) -> str:
    """The questions as JSONL in the Hugging Face data set's layout (hotpotqa/hotpot_qa)."""
    lines = []
    for q in QUESTIONS:
        lines.append(json.dumps({
            "id": q["_id"], "question": q["question"], "answer": q["answer"], "type": q["type"], "level": q["level"],
            "supporting_facts": {"title": [t for t, _ in q["supporting_facts"]],
                                 "sent_id": [i for _, i in q["supporting_facts"]]},
            "context": {"title": [t for t, _ in q["context"]], "sentences": [s for _, s in q["context"]]}}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)
