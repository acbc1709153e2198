"""What the registries hold: tasks, model presets, the spec schema, and samples
of a task (show-task)."""

import json
from typing import Optional

import typer

from orchestrator.cli.common import Format, ListFormat, app, fail, print_table
from orchestrator.cli.flags import SET_OPTION, setups_in_words, task_config_of_flags
from workloads.tasks import DEFAULT_TASK, TASKS


@app.command("show-task")
def show_task(
    task: str = typer.Argument(DEFAULT_TASK, help="a task name (`icr-sweep tasks` lists them)"),
    n: Optional[int] = typer.Option(None, help="the task's size (istree: vertices) [default: 8, or what --instance needs]"),
    setup: Optional[str] = typer.Option(None, help=f"{setups_in_words()} [default: the task's]"),
    sets: list[str] = SET_OPTION,
    seed: int = typer.Option(0),
    count: int = typer.Option(3, min=1),
    instance: Optional[str] = typer.Option(
        None, help="render this one instance instead of sampling, for a task that reads one (istree: a graph's edges "
        "in input order, e.g. '3-1,5-2,4-1,4-3,2-0')"
    ),
    format: Format = typer.Option("text", "--format"),
):
    """Print samples of a task. In text, tokens the retriever fills are [bracketed]."""
    from workloads.config import SEED_MAX
    from workloads.tasks import build_task
    from workloads.tasks.base import TRAIN_STREAM

    if not 0 <= seed <= SEED_MAX:
        fail(f"--seed must be in 0..{SEED_MAX} (2^63 - 1), got {seed}")
    given = None
    if instance is not None:
        task_cls = TASKS.get(task, (None, None))[1]
        if not hasattr(task_cls, "parse_instance"):
            fail(f"--instance: {task} renders no given instance (only sampled ones)")
        try:
            given = task_cls.parse_instance(instance)
        except ValueError as e:
            fail(f"--instance: {e}")
    if n is None:
        n = given[0] if given is not None else 8
    t = build_task(task_config_of_flags(task, n, setup, sets))
    try:
        first = [t.render(given[1])] if given is not None else []
    except ValueError as e:
        fail(f"--instance: {e}")
    # Streamed in chunks of about 2M tokens: memory stays flat whatever --count and n.
    chunk = max(1, 2_000_000 // t.max_length)
    batches = (t.samples(seed, TRAIN_STREAM, start, min(chunk, count - start)) for start in range(0, count, chunk))
    samples = iter(first) if given is not None else (s for batch in batches for s in batch)
    for i, s in enumerate(samples):
        if format == "jsonl":
            typer.echo(json.dumps(s))
            continue
        first_eos = s["tokens"].index("EOS") if "EOS" in s["tokens"] else len(s["tokens"])
        shown = [
            f"[{tok}]" if i > first_eos and not sup else tok
            for i, (tok, sup) in enumerate(zip(s["tokens"], s["supervised"]))
        ]
        about = type(t).label_text(s["label"])
        typer.echo(f"# sample {i}: {about}, {len(shown)} tokens")
        typer.echo(" ".join(shown))
        if "targets" in s:  # targets that are not the next input token (mqar)
            typer.echo("targets (index: token, each predicted at the index before): " + " ".join(
                f"{j}:{t}" for j, (t, sup) in enumerate(zip(s["targets"], s["supervised"])) if sup))


@app.command("tasks")
def tasks(format: ListFormat = typer.Option("table", "--format")):
    """List the registered tasks: their setups, what their size n counts, and their
    other parameters (set with --set in show-task and train, task_params in a spec)."""
    rows = []
    for name, (config_cls, task_cls) in sorted(TASKS.items()):
        rows.append(dict(task=name, setups=list(config_cls.setups()), n=config_cls.n_means(),
                         parameters=config_cls.parameters(), about=_first_line(task_cls)))
    if format == "json":
        typer.echo(json.dumps(rows, default=str))
        return
    print_table([{**r, "setups": ", ".join(r["setups"]),
                   "parameters": ", ".join(f"{k}={v}" for k, v in r["parameters"].items())} for r in rows])
    from workloads.tasks.hotpotqa import CONDITIONS

    typer.echo(f"Evaluated, not trained (a spec of kind: evaluation, docs/specs.md): hotpotqa, pretrained models "
               f"asked HotpotQA's validation questions under {', '.join(CONDITIONS)}")


def _first_line(task_cls) -> str:
    """The first paragraph of the task module's docstring, on one line."""
    import sys

    doc = sys.modules[task_cls.__module__].__doc__ or ""
    return " ".join(doc.split("\n\n")[0].split())


@app.command("models")
def models(format: ListFormat = typer.Option("table", "--format")):
    """List the model presets: trainable parameters (the frozen embedding aside),
    the recurrent state a sequence carries (floats, all layers; a state that grows
    with the length at its largest, and at 1,024 tokens) and the KV cache attention
    layers keep per token."""
    from workloads.models import PRESETS

    rows = [
        dict(arch=arch, size=size, params=cfg.n_params, state_floats=cfg.state_floats,
             state_floats_1k_tokens=cfg.state_floats_at(1024),
             kv_floats_per_token=cfg.kv_floats_per_token, d_model=cfg.d_model, n_layers=cfg.n_layers,
             attn_layer_idx=list(cfg.attn_layer_idx), mixer=cfg.mixer.name if cfg.n_recurrent_layers else None)
        for arch, sizes in PRESETS.items()
        for size, cfg in sizes.items()
    ]
    if format == "json":
        typer.echo(json.dumps(rows))
    else:
        for r in rows:
            idx = r.pop("attn_layer_idx")
            r["mixer"] = r["mixer"] or "-"
            r["attention layers"] = "all" if len(idx) == r["n_layers"] else ",".join(map(str, idx)) or "none"
        print_table(rows)


@app.command("schema")
def schema(kind: str = typer.Option("sweep", "--kind", help="sweep, or evaluation: specs with `kind: evaluation`")):
    """Print the JSON schema of sweep specs (for editor completion of the YAML)."""
    if kind not in ("sweep", "evaluation"):
        fail(f"--kind {kind!r}: the kinds of spec are sweep and evaluation")
    if kind == "evaluation":
        from orchestrator.spec.evaluation import EvaluationSpec as spec
    else:
        from orchestrator.spec import SweepSpec as spec

    typer.echo(json.dumps(spec.model_json_schema(), indent=1))
