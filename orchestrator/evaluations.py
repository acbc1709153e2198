"""An evaluation spec on Ray Tune (orchestrator/spec/evaluation.py): one trial per
pretrained model and condition, each asking the questions not yet answered in its
directory (workloads/evaluate_pretrained.py), and the run read back as a table, the
paper's subset and its findings. The launch, resume, status and report commands
hand a run of this kind here (orchestrator/cli/)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from orchestrator.rundir import STOP_FILE, driver_is_live, tune_statuses, write_spec_record
from orchestrator.spec.evaluation import EvaluationSpec
from workloads.evaluate_pretrained import ANSWERS_FILE, EvaluationConfig, model_params, read_answers

KEY = "evaluation"  # a Tune config's entry holding its EvaluationConfig
REPORT = "report.md"


# ---------------------------------------------------------------- the worker


def evaluation_fn(config: dict) -> None:
    """One evaluation inside a Ray worker: its answers kept in its directory in the
    sweep's (local) storage, so a retried or resumed trial asks only the rest. A stop
    request (Ctrl-C at the driver) is acknowledged with a row; Tune then ends it."""
    from ray import tune

    from orchestrator.stopping import StopRequests
    from workloads.evaluate_pretrained import run_evaluation
    from workloads.threads import bound_threads

    given = tune.get_context().get_trial_resources().required_resources
    if not given.get("GPU", 0):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # as a training trial: no GPU asked, none seen
    bound_threads(max(1, int(given.get("CPU", 1))))
    trial_dir = Path(tune.get_context().get_storage().trial_fs_path)
    asked = StopRequests(trial_dir.parent / STOP_FILE)

    def stop() -> bool:
        if asked():
            tune.report({"checkpoint_reason": "stop"})  # what the driver's StopAtStep waits for
        return False  # the answers so far are on disk: it answers on until Tune ends it

    run_evaluation(config[KEY], trial_dir, report=lambda row: tune.report(row), stop=stop)


# ---------------------------------------------------------------- the driver


def _name(trial) -> str:
    return EvaluationConfig.model_validate(trial.config[KEY]).name


def _tuner_parts(spec: EvaluationSpec, resources: dict, run_dir: str):
    from ray import tune

    from orchestrator.tune import StopAtStep

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    trainable = tune.with_resources(evaluation_fn, {"cpu": resources["cpu"], "gpu": resources["gpu"]})
    storage_path, name = run_dir.rstrip("/").rsplit("/", 1)
    table = tune.CLIReporter(metric_columns={"questions": "questions", "exact_match": "exact_match", "f1": "f1"},
                             parameter_columns={}, max_report_frequency=30)
    run_config = tune.RunConfig(name=name, storage_path=storage_path, progress_reporter=table, verbose=1,
                                failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures),
                                callbacks=[StopAtStep(run_dir)])
    return trainable, run_config


def launch(spec: EvaluationSpec, resources: dict) -> str:
    """Runs every evaluation of `spec` (Ray initialised); returns the run directory."""
    from orchestrator.tune import _fit

    run_dir = spec.run_dir()
    write_spec_record(run_dir, spec.model_dump(mode="json"), resources)
    _fit(_tuner(spec, run_dir, spec.evaluations(), *_tuner_parts(spec, resources, run_dir)), grid=True)
    return run_dir


def _tuner(spec: EvaluationSpec, run_dir: str, evaluations: list[EvaluationConfig], trainable, run_config):
    """Tune's experiment over `evaluations` in `run_dir`: a launch's, or a rebuild's."""
    from ray import tune

    from orchestrator.tune import owner_only

    configs = [e.model_dump(mode="json") for e in evaluations]
    tune_config = tune.TuneConfig(trial_name_creator=_name, trial_dirname_creator=_name,
                                  max_concurrent_trials=spec.resources.max_concurrent)
    with owner_only(run_dir):
        return tune.Tuner(trainable, param_space={KEY: tune.grid_search(configs)}, tune_config=tune_config,
                          run_config=run_config)


def resume(run_dir: str, spec: EvaluationSpec, resources: dict, say=print) -> str:
    """Continues a stopped evaluation run: finished evaluations stay, the others ask
    the questions their answers file lacks. Where Tune's state is missing (a driver
    killed before Tune first saved it) or cannot be restored, the run is rebuilt from
    the spec over the evaluations whose answers are not all in: the answers files
    are the record."""
    from ray import tune

    from orchestrator.tune import _fit, owner_only

    trainable, run_config = _tuner_parts(spec, resources, run_dir)
    tuner, problem = None, "Tune saved no experiment state there"
    if tune.Tuner.can_restore(run_dir):
        try:
            with owner_only(run_dir):
                tuner = tune.Tuner.restore(run_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
        except Exception as e:  # a damaged tuner.pkl or state fails in many ways
            problem = f"Tune cannot restore it ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if tuner is None:
        answers = read_all(run_dir, spec)
        left = [e for e in spec.evaluations() if len(answers[e.name]) < e.task.n]
        say(f"Tune's state of {run_dir} cannot be used ({problem}); the run is rebuilt from the spec and the answers "
            f"kept: {len(answers) - len(left)} evaluation(s) finished, {len(left)} to answer the rest")
        if not left:
            return run_dir
        tuner = _tuner(spec, run_dir, left, trainable, run_config)
    _fit(tuner, grid=True)
    return run_dir


# ---------------------------------------------------------------- the run read back


Answers = dict[str, dict[str, dict]]  # each evaluation's answers by question id, by evaluation


def read_all(run_dir: str | Path, spec: EvaluationSpec) -> Answers:
    """Every evaluation's answers file, read once for a status or a report."""
    return {e.name: read_answers(Path(run_dir) / e.name / ANSWERS_FILE) for e in spec.evaluations()}


def evaluations(run_dir: str | Path, spec: EvaluationSpec, answers: Answers | None = None) -> pd.DataFrame:
    """One row per planned evaluation: its name, model, condition, state (finished,
    running, interrupted, error, pending), questions answered, exact match, F1 and the
    model's parameters (`answers`: read_all's, read here where not given)."""
    run_dir = Path(run_dir)
    answers_of = answers if answers is not None else read_all(run_dir, spec)
    statuses, _ = tune_statuses(run_dir)
    live = driver_is_live(run_dir)
    rows = []
    for e in spec.evaluations():
        folder = run_dir / e.name
        answers = answers_of[e.name]
        params = model_params(folder)
        status = statuses.get(e.name)
        done = len(answers) >= e.task.n
        state = ("finished" if done else "error" if status == "ERROR" else
                 "running" if status == "RUNNING" and live else
                 "interrupted" if answers or status in ("RUNNING", "PAUSED", "TERMINATED") else "pending")
        count = len(answers)
        rows.append(dict(trial=e.name, arch=e.model.arch, size=e.model.size, setup=e.setup, n=e.task.n, state=state,
                         questions=count,
                         exact_match=sum(a["exact_match"] for a in answers.values()) / count if count else math.nan,
                         f1=sum(a["f1"] for a in answers.values()) / count if count else math.nan,
                         params=params))
    return pd.DataFrame(rows)


def subset(run_dir: str | Path, spec: EvaluationSpec, answers: Answers | None = None) -> list[str] | None:
    """The paper's subset, from the run itself: the questions every model answered
    exactly given the gold paragraphs; None until every model's gold evaluation has
    finished, or where the spec has no gold condition."""
    from workloads.tasks.hotpotqa import answerable_by_all

    if "gold" not in spec.conditions:
        return None
    answers_of = answers if answers is not None else read_all(run_dir, spec)
    gold = {}
    for e in spec.evaluations():
        if e.setup != "gold":
            continue
        answers = answers_of[e.name]
        if len(answers) < e.task.n:
            return None
        gold[e.name] = {q: bool(a["exact_match"]) for q, a in answers.items()}
    return answerable_by_all(gold)


def on_subset(run_dir: str | Path, spec: EvaluationSpec, ids: list[str], answers: Answers | None = None) -> pd.DataFrame:
    """Each finished evaluation's exact match on the questions `ids`: the findings'
    table (best.csv's columns: one seed, the subset's size as its sample size)."""
    rows = []
    answers_of = answers if answers is not None else read_all(run_dir, spec)
    wanted = set(ids)
    for e in spec.evaluations():
        answers = answers_of[e.name]
        if len(answers) < e.task.n or not ids:  # not finished (evaluations' state)
            continue
        right = sum(bool(answers[q]["exact_match"]) for q in wanted if q in answers)
        rows.append(dict(arch=e.model.arch, size=e.model.size, setup=e.setup, n=len(ids),
                         params=model_params(Path(run_dir) / e.name),
                         val_exact_match=right / len(ids), val_samples=len(ids), seeds=1, rates=1))
    return pd.DataFrame(rows)


def findings(run_dir: str | Path, spec: EvaluationSpec, ids: list[str] | None, answers: Answers | None = None):
    """The claims of workloads/tasks/_hotpotqa_findings.py decided on the subset `ids`
    (each said untestable, with why, where there is none to decide them on)."""
    from workloads.tasks._hotpotqa_findings import decide, untestable

    if not ids:
        return untestable("no model's gold-paragraph evaluation has finished yet" if ids is None and "gold" in
                          spec.conditions else "the spec asks no gold-paragraph condition, which the subset is "
                          "chosen by" if ids is None else "no question is answered exactly by every model given the "
                          "gold paragraphs: the subset is empty")
    answers = answers if answers is not None else read_all(run_dir, spec)
    unfinished = evaluations(run_dir, spec, answers)
    unfinished = unfinished[unfinished["state"] != "finished"][["setup", "state"]]
    return decide(on_subset(run_dir, spec, ids, answers), unfinished)


def report(run_dir: str | Path, spec: EvaluationSpec) -> str:
    """The run's report (Markdown), written to its report.md."""
    from workloads.tasks.hotpotqa import CONDITION_WORDS

    answers = read_all(run_dir, spec)
    table = evaluations(run_dir, spec, answers)
    ids = subset(run_dir, spec, answers)
    found = findings(run_dir, spec, ids, answers)
    lines = [f"# {spec.name}: {spec.task} with pretrained models", "",
             f"{len(spec.models)} model(s) x {len(spec.conditions)} condition(s), the validation set's first "
             f"{spec.n:,} questions each; {(table['state'] == 'finished').sum()} of {len(table)} evaluations finished.",
             "", "## Exact match (F1) on every question asked", "",
             "| model | " + " | ".join(CONDITION_WORDS[c] for c in spec.conditions) + " |",
             "|---|" + "---|" * len(spec.conditions)]
    for m in spec.models:
        cells = []
        for c in spec.conditions:
            r = table[(table["arch"] == m.arch) & (table["size"] == m.size) & (table["setup"] == c)].iloc[0]
            cells.append(f"{r['exact_match']:.3f} ({r['f1']:.3f})" if r["questions"] else "-")
            if r["state"] != "finished":
                cells[-1] += f", {r['state']} at {r['questions']:,}"
        lines.append(f"| {m.arch} {m.size} | " + " | ".join(cells) + " |")
    lines += ["", "## The paper's subset", ""]
    if ids is not None:
        lines.append(f"{len(ids):,} of {spec.n:,} questions are answered exactly by every model given the gold "
                     "paragraphs (the paper's 350 came from this rule)" + ("; exact match on them:" if ids else "."))
    if ids:
        sub = on_subset(run_dir, spec, ids, answers)
        lines += ["",
                  "| model | " + " | ".join(CONDITION_WORDS[c] for c in spec.conditions) + " |",
                  "|---|" + "---|" * len(spec.conditions)]
        for m in spec.models:
            mine = sub[(sub["arch"] == m.arch) & (sub["size"] == m.size)].set_index("setup")["val_exact_match"]
            lines.append(f"| {m.arch} {m.size} | " + " | ".join(f"{mine[c]:.3f}" if c in mine else "-"
                                                                for c in spec.conditions) + " |")
    elif ids is None:
        lines.append("Not yet known: it needs every model's gold-paragraph evaluation finished."
                     if "gold" in spec.conditions else "The spec asks no gold-paragraph condition, so no subset.")
    lines += ["", "## Findings (ours, declared before any run; decided on the subset)", "", *found.markdown()]
    text = "\n".join(lines) + "\n"
    (Path(run_dir) / REPORT).write_text(text)
    return text


def stored(run_dir: str) -> EvaluationSpec | None:
    """The evaluation spec a local run directory was launched with; None where it holds
    a sweep's, or nothing (the commands then read it as a sweep)."""
    from orchestrator.rundir import RecordError, spec_record
    from orchestrator.spec import SpecError, stored_spec
    from orchestrator.storage import is_remote

    if is_remote(run_dir) or not Path(run_dir).is_dir():
        return None
    try:
        record = spec_record(run_dir)
    except (RecordError, OSError):
        return None
    if not (isinstance(record, dict) and record.get("kind") == "evaluation"):
        return None
    try:
        return stored_spec(record)
    except SpecError:
        return None


def status_rows(run_dir: str, spec: EvaluationSpec) -> pd.DataFrame:
    """`evaluations`, with the columns status and the end of a launch read of a sweep's
    trials (an error column: an evaluation's error is Tune's, in its directory)."""
    table = evaluations(run_dir, spec)
    table["error"] = [_error(Path(run_dir) / name) if state == "error" else ""
                      for name, state in zip(table["trial"], table["state"])]
    return table


def _error(folder: Path) -> str:
    path = folder / "error.txt"
    lines = path.read_text(errors="replace").strip().splitlines() if path.is_file() else []
    return lines[-1] if lines else "failed (Tune's error.txt is missing)"


def preflight(spec: EvaluationSpec) -> list[str]:
    """What a launch on this machine would lack: the data set's file, each model's
    checkpoint and tokenizer (a folder, or a hub id in the Hugging Face cache), the
    authors' code for phi_mamba; each named with how to get it."""
    from workloads.pretrained import missing_message
    from workloads.tasks.hotpotqa import missing_data_message

    problems = []
    data = spec.evaluations()[0].task.data
    if not Path(data).expanduser().is_file():
        problems.append(missing_data_message(data))
    for i, m in enumerate(spec.models):
        for what, where in (("checkpoint", m.checkpoint), ("tokenizer", m.tokenizer or m.checkpoint)):
            if not _on_this_machine(where):
                problems.append(f"models[{i}]: " + missing_message(what, where))
        if m.code and not (Path(m.code).expanduser() / "modules" / "lm_head.py").is_file():
            problems.append(f"models[{i}].code: {m.code!r} is not a checkout of https://github.com/goombalab/phi-mamba "
                            "(no modules/lm_head.py)")
    return problems


def _on_this_machine(where: str) -> bool:
    """A folder, or a hub id with a snapshot in this machine's Hugging Face cache."""
    if Path(where).expanduser().is_dir():
        return True
    try:
        from huggingface_hub import scan_cache_dir

        return any(repo.repo_id == where for repo in scan_cache_dir().repos)
    except Exception:  # no cache yet, or huggingface_hub absent: not here
        return False
