"""The Optuna search of a sweep: one study per grid cell, each with its arch's
learning-rate distribution and trial budget, kept in the run's optuna.db (or the
spec's storage) and tied to the trials' names, directories and metrics."""

import base64
import glob
import math
import os
import pickle
from typing import Optional

from optuna.distributions import FloatDistribution
from ray.tune.search import Searcher

from orchestrator.arrays import ARRAY_KEY, ARRAY_PREFIX
from orchestrator.grid import Cell, cell_budget, cell_name, cell_rates, cells, trial_for
from orchestrator.rundir import OPTUNA_FILE, sqlite_url, tune_trial_records
from orchestrator.spec import SweepSpec
from orchestrator.storage import is_remote
from workloads.config import TrialConfig
from workloads.metrics import METRICS, PROGRESS, measured, rank_key
from workloads.naming import significant


# A study's system attribute: its sampler, pickled after each ask (CellStudy.suggest).
SAMPLER_ATTR = "icr_sampler_after_ask"


def optuna_storage(spec: SweepSpec, run_dir: str) -> Optional[str]:
    """Where the sweep keeps its Optuna studies: search.storage, else an SQLite file in
    a local run directory; None (in memory only) for a remote run without one."""
    return spec.search.storage or sqlite_url(run_dir, OPTUNA_FILE)


def study_name(spec: SweepSpec, cell) -> str:
    """The study of one cell: the sweep's name, then the cell's (as `plan` lists it)."""
    return f"{spec.name}/{cell_name(cell)}"


def sweep_studies(spec: SweepSpec) -> list[str]:
    """The names of the sweep's studies: one per cell whose rate is searched."""
    return [study_name(spec, c) for c in cells(spec) if not cell_rates(spec, c)]


def studies_in_use(spec: SweepSpec, storage: str) -> list[str]:
    """The sweep's study names that `storage` already holds (a launch must not mix a
    new sweep into an earlier one's studies)."""
    import optuna

    known = set(optuna.get_all_study_names(storage))
    return [name for name in sweep_studies(spec) if name in known]


class CellStudy:
    """The Optuna study of one cell, driven through Optuna's ask-and-tell interface
    and its storage's methods (both public), in the storage it is given (the run's
    optuna.db, the spec's, or one in memory). Tune's trial ids map to the storage's
    trial ids. A trial's end reaches Optuna's storage (at once) and Tune's
    experiment state (every few seconds) apart: a driver killed between the two
    re-runs, on resume, a trial that Optuna has finished; such a trial's rows and
    end are Optuna's already, so they are not told again. Optuna is told only
    evaluations: a checkpoint's row between them has no metric, and the trial's end
    is told with its last evaluation, not its last row: the latest the storage holds
    where Tune's is older (a driver killed after a trial's last evaluation, before
    its end: resumed, the trial trains nothing and reports nothing, and Tune ends it
    with the last result of its restored state). The study names the trial the
    report chooses (`name_choice`)."""

    def __init__(self, lr, metric: str, mode: str, seed: int, tie_break: Optional[str] = None,
                 storage=None, name: Optional[str] = None):
        import optuna

        self.space = {"lr": lr}
        self.metric, self.mode, self.tie_break, self.name = metric, mode, tie_break, name
        self.sampler = optuna.samplers.TPESampler(seed=seed)  # pickled with the searcher: its draws go on
        self.trials: dict[str, int] = {}  # Tune's trial id -> the storage's trial id
        self.finished: set[str] = set()
        self.evaluated: dict[str, dict] = {}  # each running trial's last evaluation
        self.kept = storage is not None  # in a storage of its own (else in memory, pickled whole)
        self.study, self.storage = None, None
        self.reattach(storage if storage is not None else optuna.storages.InMemoryStorage())

    def reattach(self, storage) -> None:
        """Opens the study in `storage` (created the first time), its sampler as it
        was after the study's latest ask (`suggest` keeps it in the study)."""
        import optuna

        self.storage = storage
        self.study = optuna.create_study(storage=storage, sampler=self.sampler, pruner=optuna.pruners.NopPruner(),
                                         study_name=self.name, load_if_exists=True,
                                         direction="minimize" if self.mode == "min" else "maximize")
        self.sampler = self.study.sampler = self.sampler_as_asked()
        if self.study.metric_names != [self.metric]:  # optuna-dashboard shows the objective by name
            import warnings

            with warnings.catch_warnings():  # "experimental" since Optuna 3.2, and stable in use
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.study.set_metric_names([self.metric])

    @property
    def detached(self) -> bool:
        return self.study is None

    def __getstate__(self):
        # A study kept in a storage is pickled as its trials' ids, never as a live
        # connection: Tune's tuner.pkl and the searcher's checkpoint would otherwise
        # reopen the file where the run was launched, not where it is now.
        state = self.__dict__.copy()
        if self.kept:
            state["study"], state["storage"] = None, None
        return state

    def suggest(self, trial_id: str) -> dict:
        trial = self.study.ask(fixed_distributions=self.space)
        study_id = self.storage.get_study_id_from_name(self.study.study_name)
        self.trials[trial_id] = self.storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        self.storage.set_study_system_attr(study_id, SAMPLER_ATTR, {
            "after": trial.number, "state": base64.b64encode(pickle.dumps(self.sampler)).decode()})
        return trial.params

    def sampler_as_asked(self):
        """The sampler as it was after the study's latest ask: the one the study keeps
        (SAMPLER_ATTR), else this one (a study of an earlier version, or none asked
        yet). Tune's saved state, and this object's pickle with it, can be older than
        the study: a driver killed after an ask and before Tune's next save held a
        sampler that drew that ask's rate again, and a resume trained it twice
        (issue 83, class 1). Where the study holds an ask after the one kept (a kill
        between the two writes), the sampler is reseeded: it would draw it again."""
        kept = self.storage.get_study_system_attrs(
            self.storage.get_study_id_from_name(self.study.study_name)).get(SAMPLER_ATTR)
        if not kept:
            return self.sampler
        sampler = pickle.loads(base64.b64decode(kept["state"]))
        if any(t.number > kept["after"] for t in self.study.get_trials(deepcopy=False)):
            sampler.reseed_rng()
        return sampler

    def tag(self, trial_id: str, **attrs) -> None:
        """User attributes of the Optuna trial behind Tune's `trial_id`."""
        if trial_id in self.trials:
            for key, value in attrs.items():
                self.storage.set_trial_user_attr(self.trials[trial_id], key, value)

    def tag_figures(self, trial_id: str, result: dict) -> None:
        # The evaluation's other figures beside the objective: what a trial reached.
        self.tag(trial_id, **measured(result, [k for k in (*PROGRESS, *METRICS) if k != self.metric]))

    def finished_in_storage(self, trial_id: str) -> bool:
        if trial_id in self.finished or trial_id not in self.trials:
            return trial_id in self.finished
        return self.storage.get_trial(self.trials[trial_id]).state.is_finished()

    def last_told(self, trial_id: str) -> Optional[tuple[int, float]]:
        """The latest evaluation the storage holds for the trial (its samples, its
        value): each is stored as it comes, while Tune's state and this object's
        pickle are saved every few seconds."""
        values = self.storage.get_trial(self.trials[trial_id]).intermediate_values
        return max(values.items()) if values else None

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if result.get("evaluated") is False or self.metric not in result:
            return
        self.evaluated[trial_id] = result
        if not self.finished_in_storage(trial_id):
            self.tag_figures(trial_id, result)
            if result.get("samples") is not None:  # at the trial's training samples, every tool's x axis
                self.storage.set_trial_intermediate_value(self.trials[trial_id], int(result["samples"]),
                                                          float(result[self.metric]))

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        from optuna.trial import TrialState

        last = self.evaluated.pop(trial_id, None)
        if result is not None and (result.get("evaluated") is False or self.metric not in result):
            result = last  # the trial's last row was a checkpoint between evaluations
        if trial_id not in self.trials or self.finished_in_storage(trial_id):
            self.finished.add(trial_id)
            return
        told = self.last_told(trial_id)
        if told is not None and (result is None or told[0] > result.get("samples", math.inf)):
            result = None  # Tune's last result, restored with its state, older than what the study was told
        value = told[1] if result is None and told is not None else None if result is None else result.get(self.metric)
        if result is not None and value is not None:
            self.tag_figures(trial_id, result)
        # As Ray's OptunaSearch tells it: no value is a failure where the trial
        # failed, else pruned; a value Optuna refuses (NaN) fails the trial.
        finite = value is not None and math.isfinite(value)
        state = TrialState.COMPLETE if finite else TrialState.FAIL if error or value is not None else TrialState.PRUNED
        number = self.storage.get_trial(self.trials[trial_id]).number
        self.study.tell(number, value if finite else None, state=state, skip_if_finished=True)
        self.finished.add(trial_id)
        self.name_choice()

    def name_choice(self) -> None:
        """The study's user attributes name the trial the report chooses for this
        cell and seed: the best metric, ties decided by the spec's tie-break (each as
        measured, a trial's user attributes). Optuna's own best trial is the best
        value alone, the earliest among equal ones; optuna-dashboard shows both on
        the study's page."""
        done = [t for t in self.study.trials if t.state.is_finished() and t.value is not None
                and math.isfinite(t.value) and "trial" in t.user_attrs]
        if self.tie_break is None or not done:
            return

        def rank(t):  # as the report ranks (workloads.metrics.rank_key)
            return rank_key(t.value, self.mode), rank_key(t.user_attrs.get(self.tie_break), METRICS[self.tie_break].mode)

        best = max(done, key=rank)  # the first of equal ranks, as the report's stable sort
        self.study.set_user_attr("chosen_by_report", best.user_attrs["trial"])
        self.study.set_user_attr("chosen_by", f"{self.metric} ({self.mode}), ties by {self.tie_break} "
                                              f"({METRICS[self.tie_break].mode})")


# The run directory `resume` works on: a restored searcher whose studies live in the
# run directory's own optuna.db opens that file there, wherever the run was launched.
RESUMING: dict[str, str] = {}


class CellwiseOptuna(Searcher):
    """One Optuna study per grid cell (arch, setup, size, n, seed), each given the
    learning-rate distribution of its arch and `num_samples` trials, so that each
    cell gets its own best learning rate, as the paper's sweep does; a cell whose arch
    has fixed rates in the spec runs each of them once, unsearched. With `storage`
    (an Optuna storage URL) the studies live there, named by `study_name`, for
    optuna-dashboard and `optuna.load_study`; they continue where they were on resume."""

    def __init__(self, spec: SweepSpec, storage: Optional[str] = None, fuse: int = 1):
        search = spec.search
        super().__init__(metric=search.metric, mode=search.mode)
        self.spec, self.fuse = spec, fuse
        self.studies, self.used, self.owner = {}, {}, {}
        self.members: dict[str, dict[str, tuple]] = {}  # an array's Tune trial id -> {member key: (cell, name)}
        self.names: dict = {}  # cell -> the names of its trials so far
        self.storage = storage
        self.own_storage = storage is not None and spec.search.storage is None  # the run directory's optuna.db
        rdb = None
        if storage:
            import optuna

            rdb = optuna.storages.RDBStorage(storage)  # one connection pool for every study
        self.fixed, self.budgets = {}, {}
        for i, cell in enumerate(cells(spec)):
            self.used[cell], self.budgets[cell] = 0, cell_budget(spec, cell)
            if cell_rates(spec, cell):  # an arch at fixed rates: its cells run each rate once, unsearched
                self.fixed[cell] = cell_rates(spec, cell)
                continue
            dist = getattr(spec.lr, cell.arch)
            lr = FloatDistribution(dist.low, dist.high, log=dist.distribution == "loguniform")
            self.studies[cell] = CellStudy(lr, search.metric, search.mode, seed=i, tie_break=search.ties_by,
                                           storage=rdb, name=study_name(spec, cell) if rdb else None)

    def suggest(self, trial_id: str):
        self.attach()
        if getattr(self, "adopting", None):  # trials the studies asked for after Tune's state was last saved
            return self.suggest_adopted(trial_id)
        open_cells = [c for c in self.used if self.used[c] < self.budgets[c]]
        if not open_cells:
            return Searcher.FINISHED
        cell = min(open_cells, key=lambda c: self.used[c])  # round robin over cells
        if self.fuse <= 1:
            trial, name = self.ask_cell(cell, trial_id)
            return {"trial": trial.model_dump(mode="json"), "grid": False, "name": name}
        return self.suggest_array(cell, trial_id)

    def ask_cell(self, cell, key: str) -> tuple[TrialConfig, str]:
        """One trial of `cell`: its next fixed rate, or its study's next suggestion,
        known to the study as `key` (Tune's trial id, or an array member's)."""
        if cell in self.fixed:
            lr = self.fixed[cell][self.used[cell]]
        else:
            lr = self.studies[cell].suggest(key)["lr"]
            self.owner[key] = cell
        self.used[cell] += 1
        trial = trial_for(self.spec, *cell, lr)
        name = self.name_of(cell, trial)
        if cell not in self.fixed:  # its directory relative to the run directory: still true once the run moves
            self.studies[cell].tag(key, trial=name, trial_dir=name)
        return trial, name

    def suggest_array(self, cell, trial_id: str) -> dict:
        """An array of up to `fuse` trials (orchestrator/arrays.py): asked at once,
        one at a time from the least used open cell that trains alike (the same
        arch, setup, size and n: another seed, or another rate of the same cell),
        each an Optuna trial of its cell's study, told its own value."""
        alike = [c for c in self.used if c[:4] == cell[:4]]
        members, configs = {}, []
        while len(configs) < self.fuse:
            open_alike = [c for c in alike if self.used[c] < self.budgets[c]]
            if not open_alike:
                break
            member_cell = min(open_alike, key=lambda c: self.used[c])
            key = f"{trial_id}/{len(configs)}"
            trial, name = self.ask_cell(member_cell, key)
            members[key] = (member_cell, name)
            configs.append(trial.model_dump(mode="json"))
        self.members[trial_id] = members
        name = ARRAY_PREFIX + next(iter(members.values()))[1]
        names = [member_name for _, member_name in members.values()]
        return {ARRAY_KEY: {"name": name, "members": configs, "names": names}, "grid": False, "name": name}

    def take_stock(self, records: list[tuple[str, str, dict]]) -> None:
        """Which Tune trial runs which Optuna trial, read by the trials' names from
        `records` (Tune's restored experiment state: each Tune trial's id, status and
        config), not from this searcher's own saved state: Tune writes its state, the
        searcher's and its search's counter one after the other, a sync may carry
        them into the run directory apart, and a resume may find them from different
        saves (issue 83, class 1: a state that knew a trial Tune's did not, and the
        trial was never run again; one that knew fewer, and a trial ran twice). The
        trials Tune's state holds are each cell's first `used`; every trial the
        studies hold beyond them is adopted (`adopt`)."""
        by_name = {}
        for cell, study in self.studies.items():
            study_id = study.storage.get_study_id_from_name(study.study.study_name)
            study.trials, study.finished = {}, set()
            for t in study.study.get_trials(deepcopy=False):
                if "trial" in t.user_attrs:
                    by_name[t.user_attrs["trial"]] = study.storage.get_trial_id_from_study_id_trial_number(
                        study_id, t.number)
        self.owner, self.members, self.names = {}, {}, {cell: [] for cell in self.used}
        for tune_id, status, config in records:
            array = config.get(ARRAY_KEY)
            entries = [(f"{tune_id}/{i}", name, member) for i, (name, member) in
                       enumerate(zip(array["names"], array["members"]))] if array else [
                (tune_id, config["name"], config["trial"])]
            if array:
                self.members[tune_id] = {}
            for key, name, trial in entries:
                cell = _cell_of(trial)
                if cell is None or cell not in self.used:  # not a cell of this spec (or unreadable)
                    continue
                if name not in self.names[cell]:
                    self.names[cell].append(name)
                if array:
                    self.members[tune_id][key] = (cell, name)
                if cell in self.studies and name in by_name:
                    self.owner[key] = cell
                    self.studies[cell].trials[key] = by_name[name]
                    if status == "TERMINATED":
                        self.studies[cell].finished.add(key)
        for cell in self.used:
            self.used[cell] = len(self.names[cell])
        self.adopt()

    def adopt(self) -> None:
        """Trials the studies hold that no restored Tune trial runs: asked, named
        and started after Tune last saved its experiment state (every 10 s or so),
        then the driver was killed. Each is this sweep's trial still: counted in its
        cell, and, unless it has ended, handed out again before anything new is
        asked, as the very trial (its rate, its name and so its directory and
        checkpoints; its Optuna trial told its rows). One asked and not yet named (a
        kill between the two) is named now. In arrays, as they were asked: a
        sweep's arrays of one shape are asked one after another, `fuse` at a time
        but the last, and Tune's state is saved between two asks, so the adopted
        trials of a shape, in the order they were asked, cut every `fuse`, are their
        arrays. One the study has ended is counted and kept as it ended."""
        found = []
        for cell, study in self.studies.items():
            known = set(study.trials.values())
            study_id = study.storage.get_study_id_from_name(study.study.study_name)
            for t in study.study.get_trials(deepcopy=False):
                name, trial_id = t.user_attrs.get("trial"), study.storage.get_trial_id_from_study_id_trial_number(
                    study_id, t.number)
                if trial_id in known or (name is None and t.state.is_finished()):
                    continue
                if name is None:
                    name = self.name_of(cell, trial_for(self.spec, *cell, t.params["lr"]))
                    for key, value in dict(trial=name, trial_dir=name).items():
                        study.storage.set_trial_user_attr(trial_id, key, value)
                elif name not in self.names.setdefault(cell, []):
                    self.names[cell].append(name)
                self.used[cell] += 1
                key = f"adopted/{trial_id}"
                study.trials[key] = trial_id
                if t.state.is_finished():
                    study.finished.add(key)
                else:
                    found.append((t.datetime_start, trial_id, (cell, key, t.params["lr"], name)))
        shapes: dict = {}
        for *_, trial in sorted(found, key=lambda f: f[:2]):
            shapes.setdefault(trial[0][:4], []).append(trial)
        size = max(1, self.fuse)
        self.adopting = [group[i:i + size] for group in shapes.values() for i in range(0, len(group), size)]

    def suggest_adopted(self, trial_id: str) -> dict:
        """The next adopted trial (`adopt`), or array of them, as Tune's trial `trial_id`."""
        group = self.adopting.pop(0)
        configs, members = [], {}
        for i, (cell, adopted, lr, name) in enumerate(group):
            key = trial_id if self.fuse <= 1 else f"{trial_id}/{i}"
            study = self.studies[cell]
            study.trials[key] = study.trials.pop(adopted)
            self.owner[key] = cell
            members[key] = (cell, name)
            configs.append(trial_for(self.spec, *cell, lr).model_dump(mode="json"))
        if self.fuse <= 1:
            return {"trial": configs[0], "grid": False, "name": group[0][3]}
        self.members[trial_id] = members
        name = ARRAY_PREFIX + group[0][3]
        return {ARRAY_KEY: {"name": name, "members": configs, "names": [trial[3] for trial in group]}, "grid": False,
                "name": name}

    def name_of(self, cell, trial: TrialConfig) -> str:
        """The trial's name, its rate to three significant digits: more where an
        earlier trial of the cell has the name already."""
        taken = self.names.setdefault(cell, [])
        name = next((n for n in (trial.named(significant(trial.train.lr, d)) for d in range(3, 18)) if n not in taken),
                    f"{trial.name}-{len(taken)}")  # the very same rate twice
        taken.append(name)
        return name

    def attach(self) -> None:
        """Opens the studies in their storage where they were restored detached: the
        run directory's own optuna.db (where `resume` finds the run now), else the
        storage the spec names."""
        detached = [study for study in self.studies.values() if study.detached]
        if not detached:
            return
        import optuna

        run_dir = RESUMING.get("run_dir")
        url = sqlite_url(run_dir, OPTUNA_FILE) if self.own_storage and run_dir and not is_remote(run_dir) else self.storage
        rdb = optuna.storages.RDBStorage(url)
        for study in detached:
            study.reattach(rdb)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.attach()
        if trial_id in self.members:  # an array: each member's row to its own trial
            keys = {name: key for key, (_, name) in self.members[trial_id].items()}
            for name, row in _nested(result, "members").items():
                if name in keys:
                    self.member_row(keys[name], row)
            for name in _nested(result, "member_errors"):
                if name in keys:
                    self.member_end(trial_id, keys[name], error=True)
        elif trial_id in self.owner:
            self.studies[self.owner[trial_id]].on_trial_result(trial_id, result)

    def member_row(self, key: str, row: dict) -> None:
        if key in self.owner:
            self.studies[self.owner[key]].on_trial_result(key, row)

    def member_end(self, trial_id: str, key: str, error: bool) -> None:
        """A member's end, told with its last evaluation (CellStudy keeps it)."""
        self.members.get(trial_id, {}).pop(key, None)
        if key in self.owner:
            self.studies[self.owner.pop(key)].on_trial_complete(key, {"evaluated": False}, error)

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        self.attach()
        if trial_id in self.members:
            for key in list(self.members[trial_id]):
                self.member_end(trial_id, key, error)
            self.members.pop(trial_id, None)
        elif trial_id in self.owner:
            self.studies[self.owner.pop(trial_id)].on_trial_complete(trial_id, result, error)

    def save(self, checkpoint_path: str) -> None:
        state = {"used": self.used, "owner": self.owner, "names": self.names, "members": self.members,
                 "studies": {c: s.__getstate__() for c, s in self.studies.items()}}
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        """The state `save` wrote, trusted as it is (Tune restores through
        `restore_from_dir`, which reads its own experiment state beside it)."""
        self.load_state(checkpoint_path)
        self.adopt()

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """The newest saved state, then which trial is which as Tune's experiment
        state restored beside it says (`take_stock`). A state of Tune's whose
        trials carry no name (an earlier version's) leaves the saved one trusted."""
        newest = max(glob.glob(os.path.join(checkpoint_dir, self.CKPT_FILE_TMPL.format("*"))), default=None)
        if newest is None:
            raise RuntimeError(f"Searcher unable to find checkpoint in {checkpoint_dir}")
        self.load_state(newest)
        records = tune_trial_records(checkpoint_dir)
        if records and all(config.get("name") for _, _, config in records):
            self.take_stock(records)
        else:
            self.adopt()

    def load_state(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.used, self.owner, self.names = state["used"], state["owner"], state.get("names", {})
        self.members = state.get("members", {})
        for cell, study_state in state["studies"].items():
            self.studies[cell].__dict__.update(_study_state(study_state))
        self.attach()


def _cell_of(trial: dict) -> Optional[Cell]:
    """The cell of a trial config (as stored): the trials only a rate tells apart;
    None where today's schema cannot read it (an earlier version's config)."""
    from pydantic import ValidationError

    try:
        config = TrialConfig.model_validate(trial)
    except (ValidationError, TypeError, ValueError):
        return None
    return Cell(config.model.arch, config.setup, config.model.size, config.task.n, config.train.seed)


def _nested(result: dict, key: str) -> dict:
    """`result[key]` as a dict: Tune hands a searcher its rows flattened
    ("members/<name>/val_loss"); an array's rows are nested under `key`."""
    if isinstance(result.get(key), dict):
        return result[key]
    out: dict = {}
    for flat, value in result.items():
        if flat.startswith(f"{key}/"):
            name, _, field = flat[len(key) + 1:].partition("/")
            if field:
                out.setdefault(name, {})[field] = value
            else:
                out[name] = value
    return out


def _study_state(state: dict) -> dict:
    """A cell study's pickled state as this version keeps it: one saved while it was
    Ray's OptunaSearch (before 2026-11-26) kept the storage's trial ids under other
    names, and is reopened from its storage (an in-memory one is not carried over)."""
    if "_ot_trials" not in state:
        return state
    ids = {tid: t for tid, t in state["_ot_trials"].items() if isinstance(t, int)}
    return {"trials": ids, "finished": set(state.get("_completed_trials", ())), "evaluated": state.get("_evaluated", {})}
