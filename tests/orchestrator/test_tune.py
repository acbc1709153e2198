"""The per-cell Optuna searcher: budgets, configs it proposes, and save/restore for resume."""


from orchestrator.grid import cells
from orchestrator.spec import SweepSpec
from orchestrator.tune import CellwiseOptuna
from workloads.config import TrialConfig


def optuna_spec(**search):
    return SweepSpec(
        name="o", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0]),
        lr=dict(transformer=dict(distribution="loguniform", low=1e-4, high=1e-2),
                mamba=dict(distribution="uniform", low=1e-3, high=2e-3)),
        search=dict(method="optuna", **search), training=dict(samples=100, warmup_samples=10, eval_every=100),
    )


def test_each_cell_gets_its_budget_of_trials_within_its_distribution():
    spec = optuna_spec(num_samples=3)
    searcher = CellwiseOptuna(spec)
    proposals = [searcher.suggest(f"t{i}") for i in range(6)]
    assert searcher.suggest("t6") == CellwiseOptuna.FINISHED
    configs = [TrialConfig.model_validate(p["trial"]) for p in proposals]
    for arch, (low, high) in {"transformer": (1e-4, 1e-2), "mamba": (1e-3, 2e-3)}.items():
        lrs = [c.train.lr for c in configs if c.model.arch == arch]
        assert len(lrs) == 3 and all(low <= lr <= high for lr in lrs)
    assert len(cells(spec)) == 2


def test_a_restored_searcher_continues_where_it_stopped(tmp_path):
    spec = optuna_spec(num_samples=2)
    first = CellwiseOptuna(spec)
    done = [first.suggest("a"), first.suggest("b")]
    first.on_trial_complete("a", {"val_exact_match": 0.5, "training_iteration": 1})
    first.save(str(tmp_path / "searcher.pkl"))
    restored = CellwiseOptuna(spec)
    restored.restore(str(tmp_path / "searcher.pkl"))
    rest = [restored.suggest("c"), restored.suggest("d")]
    assert restored.suggest("e") == CellwiseOptuna.FINISHED
    archs = sorted(TrialConfig.model_validate(p["trial"]).model.arch for p in done + rest)
    assert archs == ["mamba", "mamba", "transformer", "transformer"]
    restored.on_trial_complete("b", {"val_exact_match": 0.7, "training_iteration": 1})  # known after restore


def test_studies_kept_in_a_storage_hold_each_cells_trials_and_values_and_survive_a_restore(tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = optuna_spec(num_samples=2)
    first = CellwiseOptuna(spec, storage)
    proposals = {tid: first.suggest(tid) for tid in ("a", "b")}
    first.on_trial_complete("a", {"val_exact_match": 0.25, "training_iteration": 1})
    first.save(str(tmp_path / "searcher.pkl"))
    restored = CellwiseOptuna(spec, storage)
    restored.restore(str(tmp_path / "searcher.pkl"))
    restored.on_trial_complete("b", {"val_exact_match": 0.75, "training_iteration": 1})
    names = sorted(optuna.get_all_study_names(storage))
    assert names == ["o/mamba-cot-tiny-n5-s0", "o/transformer-cot-tiny-n5-s0"]
    for tid, value in (("a", 0.25), ("b", 0.75)):
        config = TrialConfig.model_validate(proposals[tid]["trial"])
        study = optuna.load_study(study_name=f"o/{config.model.arch}-cot-tiny-n5-s0", storage=storage)
        (trial,) = study.trials
        assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == value
        assert trial.params["lr"] == config.train.lr
