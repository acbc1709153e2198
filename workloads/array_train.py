"""The loop of a trial array (workloads/arrays.py): K trials trained as one model,
each still its trial, in the lone trial's loop (`train_loop`):

- its rows: at the samples its lone trial evaluates and checkpoints at, with its
  own training loss, rate and metrics (each member's samples/s is its own: the
  array trains K times as many);
- its checkpoint: the very file its lone trial writes (`Trial.save`), in a folder
  named after it inside the array's checkpoint folder, so that a member's
  checkpoint continues as a lone trial and a lone trial's as a member;
- its failure: a member whose loss is not finite fails alone, as its lone trial
  would (the same NonFiniteLoss, at the same check), its folder leaves the array's
  checkpoints, and the others train on unchanged.

Like run_trial, it knows nothing of Ray: the sweep's worker hosts it.
"""

import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from workloads.arrays import TrialArray
from workloads.checkpoint import CHECKPOINT_FILE, CheckpointError
from workloads.config import TrialConfig
from workloads.train import Checkpoints, Hooks, LoopRun, NonFiniteLoss, run_trial, train_loop


@dataclass(frozen=True)
class ArrayHooks(Hooks):
    """Hooks (workloads/train.py) for an array, member by member:
    `report(rows, checkpoint_dir)` gets every training member's row at once, by
    trial name, with the folder holding each one's checkpoint in a folder named
    after it; `on_resume(name, rows)` gets a member's rows up to the checkpoint it
    continues from; `fail(name, error)` hears once of a member that failed (its
    NonFiniteLoss), which then trains and reports no more. `stop`, `stop_ends`,
    `on_step`, `clock` and `stop_after` are the array's, as a lone trial's."""

    fail: Optional[Callable[[str, NonFiniteLoss], None]] = None


def run_array(configs: list[dict | TrialConfig], hooks: ArrayHooks = ArrayHooks(),
              checkpoints: Checkpoints = Checkpoints(), names: Optional[list[str]] = None) -> dict[str, dict]:
    """Trains the trials `configs` (equal but for rate and seed: `array_key`) as one
    array to their sample budget; returns each training member's latest metrics by
    name (`names`, by default their configs'; an Optuna trial's is its rate to three
    digits). `checkpoints.resume_from` holds a folder per member (every member's,
    at one step) or none."""
    if len(configs) == 1:
        return _alone(TrialConfig.model_validate(configs[0]), hooks, checkpoints, (names or [None])[0])
    array = TrialArray(configs, names)
    _restore(array, checkpoints.resume_from, hooks.on_resume)
    if checkpoints.dir is not None:  # an array that could not keep its first checkpoint trains nothing
        for trial in array.trials:
            trial.check_room((checkpoints.dir, *checkpoints.room_in))
    val_batches = array.trials[0].validation_batches()  # one task and validation set: array_key holds them
    array.model.train()
    run = _ArrayRun(array, hooks, checkpoints)
    metrics = {name: {**t.history[-1], "config": t.config.model_dump(mode="json")}
               for name, t in zip(array.names, array.trials) if t.history}
    return train_loop(run, hooks, val_batches, metrics)


def _alone(config: TrialConfig, hooks: ArrayHooks, checkpoints: Checkpoints, name: Optional[str]) -> dict[str, dict]:
    """An array of one: its lone trial's loop (run_trial), heard and kept as an array's."""
    name = name or config.name
    own = None if checkpoints.dir is None else Path(checkpoints.dir) / name
    report = None if hooks.report is None else (lambda row, _: hooks.report({name: row}, checkpoints.dir))
    on_resume = None if hooks.on_resume is None else (lambda rows: hooks.on_resume(name, rows))
    lone = dataclasses.replace(hooks, report=report, on_resume=on_resume)
    resume = None if checkpoints.resume_from is None else Path(checkpoints.resume_from) / name
    try:
        return {name: run_trial(config, lone, dataclasses.replace(checkpoints, dir=own, resume_from=resume))}
    except NonFiniteLoss as error:
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
        if hooks.fail is None:
            raise
        hooks.fail(name, error)
        return {}


def _restore(array: TrialArray, resume_from: Optional[Path], on_resume) -> None:
    """Continues every member from its checkpoint in `resume_from`, where there are any."""
    if resume_from is None:
        return
    folders = {name: Path(resume_from) / name for name in array.names}
    missing = [name for name, folder in folders.items() if not (folder / CHECKPOINT_FILE).exists()]
    if len(missing) == len(folders):
        return
    if missing:
        raise CheckpointError(f"{resume_from} holds no checkpoint of {', '.join(missing)}: an array's members continue "
                              "together, from checkpoints of one step")
    for name, trial in zip(array.names, array.trials):
        trial.restore(folders[name])
    array.from_members()
    for name, trial in zip(array.names, array.trials):
        if on_resume is not None and trial.row is not None:
            earlier = [dict(r) for r in trial.history if r is not trial.row and r != trial.row]
            on_resume(name, earlier + [dict(trial.row)])


class _ArrayRun(LoopRun):
    """One run of an array's loop: what `train_loop` calls, as a lone trial's
    `_Run` (workloads/train.py), with each row and checkpoint made per member
    (its pending losses are the members' (K,) at each step)."""

    def __init__(self, array: TrialArray, hooks: ArrayHooks, checkpoints: Checkpoints):
        super().__init__(array.trials[0].config.train, checkpoints.dir, checkpoints.room_in, hooks.clock)
        self.array, self.hooks = array, hooks
        self.tokens = [0] * array.k

    @property
    def samples(self) -> int:
        return self.array.samples

    @property
    def training(self) -> bool:
        return bool(self.array.active)

    def train_step(self) -> tuple[int, bool]:
        array = self.array
        started, before = time.perf_counter(), array.samples
        losses = array.step()
        self.tokens = [a + b for a, b in zip(self.tokens, array.step_tokens)]
        step = array.optimizer.steps
        return step, self.stepped(started, before, array.samples, losses, step)

    def flush_losses(self, step: int) -> None:
        """Checks the pending losses: a member with one not finite fails, alone."""
        if not self.pending:
            return
        ended = self.array.check(torch.stack(self.pending), step)
        self.pending.clear()
        for k in ended:
            name = self.array.names[k]
            if self.checkpoint_dir is not None:  # the array's checkpoints hold the members that train on
                shutil.rmtree(self.checkpoint_dir / name, ignore_errors=True)
            if self.hooks.fail is not None:
                self.hooks.fail(name, self.array.failed[k])

    def progress(self, k: int, step: int, **extra) -> dict:
        """Member k's row, its lone trial given the array's state first (`to_member`)."""
        return self.row(self.array.trials[k], step, self.tokens[k], self.array.resolved(), **extra)

    def checkpoint(self, step: int, reason: str) -> dict[str, dict]:
        """Each training member's progress row (no evaluation), checkpointed and reported."""
        self.flush_losses(step)
        rows = {}
        for k in self.array.active:
            trial, name = self.array.to_member(k), self.array.names[k]
            rows[name] = self.progress(k, step, final_eval=False, evaluated=False, checkpoint_reason=reason)
            trial.row = {key: v for key, v in rows[name].items() if key != "config"}
        self._save_and_report(rows)
        return rows

    def evaluate(self, step: int, val_batches) -> dict[str, dict]:
        """Each training member's evaluation row, as its lone trial's (`_Run.evaluate`)."""
        rows = {}
        for k in self.array.active:
            trial = self.array.to_member(k)
            tc = trial.config.train
            final = trial.samples == tc.samples
            scores = trial.evaluate(val_batches, with_generation=final or tc.gen_every_eval, held_out=final)
            row = self.progress(k, step, **scores, final_eval=final, evaluated=True)
            trial.loss_sum, trial.loss_steps = 0.0, 0
            trial.history.append({key: v for key, v in row.items() if key != "config"})
            trial.row = trial.history[-1]
            rows[self.array.names[k]] = row
        self._save_and_report(rows)
        return rows

    def stopped(self, metrics: dict[str, dict], step: int) -> dict[str, dict]:
        out = {}
        for k in self.array.active:
            name = self.array.names[k]
            if name not in metrics:
                self.array.to_member(k)
            out[name] = {**(metrics.get(name) or self.progress(k, step, final_eval=False, evaluated=False)), "stopped": True}
        return out

    def _save_and_report(self, rows: dict[str, dict]) -> None:
        if self.checkpoint_dir is not None:
            for k in self.array.active:  # each given the array's state for its row (to_member)
                self.array.trials[k].save(self.checkpoint_dir / self.array.names[k], self.room_in)
            self.last_checkpoint = self.clock()
        if self.hooks.report is not None:
            self.hooks.report(rows, self.checkpoint_dir)
