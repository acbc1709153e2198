"""A spec's projected wall time from measured rates: trial times weighted by their
shares over the devices, never less than the longest trial; classes the bench did
not run scaled from the nearest one measured; plan says where the figure comes from."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.projection import project

RATES = [
    dict(arch="transformer", size="0.5M", setup="cot", n=16, samples_per_s=100.0, tokens_per_sample=70.0, longest_sample=80),
    dict(arch="mamba", size="0.5M", setup="cot", n=16, samples_per_s=50.0, tokens_per_sample=70.0, longest_sample=80),
]


def _trial(arch, n=16, setup="cot", samples=1000, share=0.5, longest=80, size="0.5M"):
    return dict(arch=arch, size=size, setup=setup, n=n, samples=samples, share=share, longest_sample=longest)


def test_trial_times_weighted_by_share_over_the_devices():
    trials = [_trial("transformer")] * 4 + [_trial("mamba")] * 2  # 10 s each, 20 s each
    p = project(trials, RATES, devices=1)
    assert p.trial_seconds == pytest.approx(4 * 10 + 2 * 20)
    assert p.seconds == pytest.approx((4 * 10 + 2 * 20) * 0.5)
    assert p.measured == 6 and not p.scaled
    assert project(trials, RATES, devices=2).seconds == pytest.approx(20)  # the longest trial bounds it


def test_an_unmeasured_class_runs_at_its_neighbours_tokens_per_second():
    p = project([_trial("transformer", n=32, longest=160)], RATES, devices=1)
    assert p.measured == 0 and p.scaled == ["transformer-0.5M-cot-32 <- transformer-0.5M-cot-16"]
    assert p.trial_seconds == pytest.approx(1000 / 50)  # twice as long a sample: half the samples per second


def test_an_arch_never_measured_is_refused_by_name():
    with pytest.raises(ValueError, match="no measured rate for hybrid"):
        project([_trial("hybrid")], RATES, devices=1)


def test_trials_in_arrays_take_their_arrays_measured_rate_else_count_as_separate_trials():
    """Issue 50: plan counted arrays as separate trials whatever was measured. A
    member of an array of 4 (0.5 GPU for the array: 0.125 each) at its measured
    member rate; where only the rate alone was measured, a lone trial's share and
    rate, and the projection says which classes."""
    in_arrays = dict(members=4, share=0.125, share_alone=0.5)
    fused = [*RATES, dict(RATES[0], members=4, samples_per_s=80.0)]  # a member of 4: 80/s, 4 x 80 = 320/s per array
    p = project([dict(_trial("transformer"), **in_arrays)] * 16, fused, devices=1)  # 4 arrays of 4
    assert p.trial_seconds == pytest.approx(16 * 1000 / 80) and p.seconds == pytest.approx(16 * 12.5 * 0.125)
    assert p.measured == 16 and not p.alone
    alone = project([dict(_trial("transformer"), **in_arrays)] * 16, RATES, devices=1)
    assert alone.seconds == pytest.approx(project([_trial("transformer")] * 16, RATES, devices=1).seconds) == 80
    assert alone.alone == ["transformer-0.5M-cot-16 in arrays of 4"] and "1 classes in arrays at their rate alone" in \
        alone.describe()
    scaled = project([dict(_trial("transformer", n=32, longest=160), **in_arrays)], fused, devices=1)
    assert scaled.trial_seconds == pytest.approx(1000 / 40) and scaled.alone == []  # the array's tokens/s, halved


def test_spec_trials_give_each_member_its_arrays_share():
    from orchestrator.projection import spec_trials
    from orchestrator.spec import SweepSpec

    spec = SweepSpec(name="a", axes=dict(archs=["transformer"], setups=["cot"], sizes=["0.5M"], n=[16], seeds=[0, 1, 2]),
                     lr=dict(transformer=[1e-3, 3e-3]), resources=dict(fuse=4, gpus_per_trial=0.5))
    rows = spec_trials(spec, on_gpu=True)
    assert sorted(r["members"] for r in rows) == [3, 3, 3, 3, 3, 3]  # 6 alike trials: two arrays of 3
    assert {r["share"] for r in rows} == {0.5 / 3} and {r["share_alone"] for r in rows} == {0.5}
    lone = spec_trials(spec.model_copy(update={"resources": spec.resources.model_copy(update={"fuse": 1})}), True)
    assert {(r["members"], r["share"]) for r in lone} == {(1, 0.5)}


def _spec(tmp_path):
    spec = dict(name="p", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["0.5M"], n=[16, 32]),
                training=dict(samples=1000, warmup_samples=10), resources=dict(cpus_per_trial=1, device="cpu"))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_plan_projects_from_a_rates_file_and_names_it(tmp_path):
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"device": "cpu", "classes": RATES}))
    result = CliRunner().invoke(app, ["plan", str(_spec(tmp_path)), "--rates", str(rates), "--devices", "2"])
    assert result.exit_code == 0, result.output
    # 10 + 20 s measured at n=16, 20 + 40 s scaled at n=32, one CPU each on two CPUs: 45 s.
    line = [l for l in result.output.splitlines() if l.startswith("projected wall time")][0]
    assert "45 s (2 trials at measured rates, 2 scaled) on 2 CPU (cpu)" in line and str(rates) in line


def test_plan_without_rates_says_how_to_measure_them(tmp_path):
    result = CliRunner().invoke(app, ["plan", str(_spec(tmp_path)), "--rates", str(tmp_path / "none.json")])
    assert result.exit_code == 0, result.output
    assert "projected wall time: unknown; no measured rates for cpu" in result.output
    assert "bench/bench_sweep.py --device cpu" in result.output


@pytest.mark.parametrize("change, message", [
    (dict(samples_per_s=-5.0), "classes.0.samples_per_s: Input should be greater than 0"),
    (dict(samples_per_s=float("nan")), "classes.0.samples_per_s"),
    (dict(samples_per_s="fast"), "classes.0.samples_per_s"),
    (dict(longest_sample=0), "classes.0.longest_sample: Input should be greater than 0"),
    (dict(tokens_per_sample=None), "classes.0.tokens_per_sample"),
])
def test_plan_refuses_a_rates_file_it_cannot_project_from_naming_the_field(tmp_path, change, message):
    """Issue 28, class 9: '0 s' for negative rates, 'nan h' for NaN ones, and a
    TypeError, KeyError or ZeroDivisionError for a string, a missing key, a zero."""
    rates = tmp_path / "rates.json"
    rows = [{**RATES[0], **change}, RATES[1]]
    rates.write_text(json.dumps({"device": "cpu", "classes": rows}).replace("NaN", "NaN"))
    result = CliRunner().invoke(app, ["plan", str(_spec(tmp_path)), "--rates", str(rates)])
    assert result.exit_code == 2 and message in result.output and str(rates) in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("devices", ["nan", "-2", "0"])
def test_plan_refuses_a_device_count_that_is_not_positive(tmp_path, devices):
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"device": "cpu", "classes": RATES}))
    result = CliRunner().invoke(app, ["plan", str(_spec(tmp_path)), "--rates", str(rates), "--devices", devices])
    assert result.exit_code == 2 and "--devices: a positive number" in result.output, result.output


def test_plan_does_not_project_one_device_from_anothers_rates(tmp_path):
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"device": "cpu", "classes": RATES}))
    result = CliRunner().invoke(app, ["plan", str(_spec(tmp_path)), "--rates", str(rates),
                                      "--device-name", "NVIDIA H100 80GB HBM3"])
    assert result.exit_code == 2 and "was measured on cpu, not on NVIDIA H100 80GB HBM3" in result.output, result.output


def test_plan_for_a_named_gpu_packs_gpu_memory_auto_against_the_memory_its_rates_recorded(tmp_path, monkeypatch):
    """`gpu_memory_gb: auto` means the GPU the trials run on: planned from a machine
    without one for a device whose rates file records its memory, trials take the
    shares they take there (Mamba 2M at retrieval n=64, about 33 GB: half of 80 GB,
    all of the 40 GB packed against without that record)."""
    monkeypatch.setattr("orchestrator.packing.local_gpu_memory_gb", lambda: None)
    spec = dict(name="g", axes=dict(archs=["mamba"], setups=["retrieval"], sizes=["2M"], n=[64]),
                training=dict(samples=1000, warmup_samples=10), resources=dict(gpus_per_trial="auto", gpu_memory_gb="auto"))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    rates = tmp_path / "rates.json"
    classes = [dict(arch="mamba", size="2M", setup="retrieval", n=64, samples_per_s=50.0, tokens_per_sample=1750.0,
                    longest_sample=2535)]

    def plan(record: dict, *words) -> str:
        rates.write_text(json.dumps({"device": "Big GPU", "classes": classes, **record}))
        result = CliRunner().invoke(app, ["plan", str(path), "--device-name", "Big GPU", "--rates", str(rates), *words])
        assert result.exit_code == 0, result.output
        return result.output

    assert [r["gpus"] for r in json.loads(plan({"gpu_memory_gb": 80.0}, "--format", "json"))] == [0.5]
    assert "against 80 GB GPUs (resources.gpu_memory_gb: auto, the Big GPU's, as its rates record)" in plan(
        {"gpu_memory_gb": 80.0})
    assert [r["gpus"] for r in json.loads(plan({}, "--format", "json"))] == [1.0]
    assert "against 40 GB GPUs (resources.gpu_memory_gb: auto, and this machine has no GPU)" in plan({})


def test_the_capacity_questions_gpu_specs_plan_within_two_hours_on_one_h200():
    """Issue 81: the paper-size capacity-or-training specs (IsTree and MQAR), planned from
    the H200's measured rates, fit two hours on one GPU together; each is a GPU spec."""
    from orchestrator.projection import load_rates, project, rates_file, spec_trials
    from orchestrator.spec import load_spec

    record = load_rates(rates_file("NVIDIA H200"))
    seconds = 0.0
    for name in ("capacity_or_training_gpu", "capacity_or_training_mqar_gpu"):
        spec = load_spec(Path(__file__).parents[2] / "sweeps" / f"{name}.yaml")
        assert spec.resources.gpus_per_trial == "auto" and spec.axes.sizes == ["0.5M"]  # the paper's size, on GPUs
        seconds += project(spec_trials(spec, on_gpu=True), record.classes, devices=1).seconds
    assert 0 < seconds <= 2 * 3600, seconds
