"""Trial arrays: K trials that differ only in learning rate and seed, trained as one
model whose layers compute every member at once (horizontal fusion: HFTA, Wang et
al., MLSys 2021). At these sizes a step is a thousand small kernels and the GPU
waits on launches; K members in one set of kernels share that cost.

Each member stays its trial, exactly (within fp32 rounding; tests/workloads/test_arrays.py):
- its init: each member's model is built as its lone trial builds it (under its
  seed), then its parameters are stacked with the others';
- its samples: its seed's stream, its batch right-padded to the array's width
  (padding carries no loss, and the models are causal: no earlier logit changes);
- its gradient: the array's loss is the sum of the members' own mean losses, and
  no layer mixes members, so each member's gradient is its own loss's;
- its optimiser: Adam (AdamW, weight decay 0) with its own rate and cosine
  schedule (`MemberAdam`), its own gradient clipping (a norm over its own
  parameters, never the array's), its own NaN check: a member whose loss is not
  finite stops updating, alone.

What is fused: the members are folded into the batch (rows k*B .. (k+1)*B - 1 are
member k's), every Linear becomes one batched matmul over stacked weights
(K, out, in), every RMSNorm one normalisation with per-member weights, and so
attention is one `scaled_dot_product_attention` over all members' batches, rotary
tables shared. Mamba's mixer has a fused form (workloads/models/mamba/array.py:
its projections and convolution stacked, its scan one mamba-ssm call on CUDA with
the members' channels side by side, once per member on CPU), and so the hybrid
fuses whole. The newer mixers fuse too: Mamba-2's (workloads/models/mamba2/array.py:
its kernel with the members' heads side by side), Gated DeltaNet's and Gated
DeltaProduct's (workloads/models/gated_deltanet/array.py) and RWKV-7's
(workloads/models/rwkv7/array.py), whose scans have no parameter of their own and
run once over every member's rows. A module with no fused form would run its
members one after another on their rows (`MembersInTurn`), fused around it. A
batch is cut into length-grouped micro-batches as a lone trial's is
(workloads/batching.py), on the widest member's length at each place.
"""

import copy
import math
from typing import Optional

import numpy as np
import torch
from torch import nn

from workloads.batching import group_rows, overhead_tokens
from workloads.checkpoint import CheckpointError, differences, what_trains
from workloads.config import TrialConfig
from workloads.evaluate import supervised_loss
from workloads.models.stacked import StackedLinear, StackedRMSNorm
from workloads.tasks import Batch
from workloads.tasks.base import TRAIN_STREAM
from workloads.train import Trial, lr_factor, non_finite_loss


class MembersInTurn(nn.Module):
    """A module no fused form exists for: each member's own copy runs on its rows."""

    def __init__(self, members: list[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(copy.deepcopy(m) for m in members)

    def forward(self, x: torch.Tensor, *args) -> torch.Tensor:
        rows = x.chunk(len(self.members), dim=0)
        return torch.cat([m(part, *args) for m, part in zip(self.members, rows)], dim=0)


def _fused_types() -> tuple[type, ...]:
    from workloads.models.lm import RecurrentLayer, SequenceModel
    from workloads.models.transformer import Attention, AttentionLayer, SwiGLU

    return SequenceModel, nn.ModuleList, AttentionLayer, Attention, SwiGLU, RecurrentLayer


def _fused_forms() -> dict[type, type]:
    """Modules with a fused form of their own: the leaves, and the mixers that have one."""
    from workloads.models.gated_deltanet.array import StackedDeltaRuleMixer
    from workloads.models.gated_deltanet.layer import GatedDeltaNetMixer
    from workloads.models.gated_deltanet2.layer import GatedDeltaNet2Mixer
    from workloads.models.gated_deltaproduct.layer import GatedDeltaProductMixer
    from workloads.models.kda.layer import KimiDeltaAttentionMixer
    from workloads.models.log_linear_mamba2.array import StackedLogLinearMamba2Mixer
    from workloads.models.log_linear_mamba2.layer import LogLinearMamba2Mixer
    from workloads.models.mamba.array import StackedMambaMixer
    from workloads.models.mamba.layer import MambaMixer
    from workloads.models.mamba2.array import StackedMamba2Mixer
    from workloads.models.mamba2.layer import Mamba2Mixer
    from workloads.models.rwkv7.array import StackedRWKV7Mixer
    from workloads.models.rwkv7.layer import RWKV7Mixer

    return {nn.Linear: StackedLinear, nn.RMSNorm: StackedRMSNorm, MambaMixer: StackedMambaMixer,
            GatedDeltaNetMixer: StackedDeltaRuleMixer, GatedDeltaProductMixer: StackedDeltaRuleMixer,
            KimiDeltaAttentionMixer: StackedDeltaRuleMixer, GatedDeltaNet2Mixer: StackedDeltaRuleMixer,
            LogLinearMamba2Mixer: StackedLogLinearMamba2Mixer,
            Mamba2Mixer: StackedMamba2Mixer, RWKV7Mixer: StackedRWKV7Mixer}


class ArrayModel(nn.Module):
    """K models of one config as one: `forward(tokens)` takes the members' batches
    stacked (K*B, T) and returns their logits (K*B, T, V). Containers of `FUSED`
    are walked (their forward only calls their children on whole tensors), their
    Linear and RMSNorm leaves stacked; any other module runs `MembersInTurn`."""

    def __init__(self, models: list[nn.Module]):
        super().__init__()
        self.k = len(models)
        self.body = copy.deepcopy(models[0])
        self.parts: dict[str, nn.Module] = {}  # path in the lone model -> its stacked or in-turn module
        self._fuse(self.body, models, "", _fused_types(), _fused_forms())
        self.owner = {id(p): k for part in self.parts.values() if isinstance(part, MembersInTurn)
                      for k, m in enumerate(part.members) for p in m.parameters()}

    def _fuse(self, parent: nn.Module, members: list[nn.Module], path: str, fused: tuple[type, ...], forms: dict) -> None:
        for name, child in list(parent.named_children()):
            own = [getattr(m, name) for m in members]
            where = f"{path}{name}"
            if type(child) in forms:
                part = forms[type(child)](own)
            elif isinstance(child, fused) and not any(True for _ in child.parameters(recurse=False)):
                self._fuse(child, own, f"{where}.", fused, forms)
                continue
            else:
                part = MembersInTurn(own)
            setattr(parent, name, part)
            self.parts[where] = part

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.body(tokens)

    def member_of(self, param: nn.Parameter) -> Optional[int]:
        """The member a parameter belongs to wholly, or None for a stacked one (K first)."""
        return self.owner.get(id(param))

    def member_slots(self, k: int) -> dict[str, tuple[nn.Parameter, Optional[int]]]:
        """Member k's parameters under its lone model's names: (the array's parameter,
        k where it is stacked, None where it is member k's own)."""
        slots = {}
        for path, part in self.parts.items():
            own = part.members[k] if isinstance(part, MembersInTurn) else part
            slots.update({f"{path}.{name}": (p, None if own is not part else k) for name, p in own.named_parameters()})
        return slots

    def member_state(self, k: int, grads: bool = False) -> dict:
        """Member k's parameters and buffers under its lone model's names (detached);
        with `grads`, its parameters' gradients instead (where they have one)."""
        state = {}
        for name, (p, index) in self.member_slots(k).items():
            value = p.grad if grads else p
            if value is not None:
                state[name] = (value if index is None else value[index]).detach()
        if not grads:  # buffers: only a member's own module has them (a stacked part holds parameters alone)
            for path, part in self.parts.items():
                if isinstance(part, MembersInTurn):
                    saved = part.members[k].state_dict(keep_vars=True)
                    state.update({f"{path}.{name}": v.detach() for name, v in saved.items() if f"{path}.{name}" not in state})
        return state


class MemberAdam:
    """Adam (AdamW with weight decay 0, as a lone trial's) over an array's
    parameters, each member's slice at its own rate: torch's AdamW arithmetic
    (its single-tensor form) as a few multi-tensor calls (`torch._foreach_*`) over
    every parameter, each member's update one call over its own slices at its own
    step size, so that a step's launches do not grow with the parameters times the
    members and nothing waits on the GPU. Members step together (one array step is
    one step of each); a member left out of `step`'s rates (failed) stays as it is.
    Gradients are zeroed in place, not dropped, so each member's slices of them
    are views made once (`clip` scales them)."""

    def __init__(self, model: ArrayModel, betas=(0.9, 0.999), eps: float = 1e-8):
        self.model, self.betas, self.eps = model, betas, eps
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.state = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for p in self.params}
        self.denoms = {id(p): torch.zeros_like(p) for p in self.params}
        self.steps = 0
        self._adam = self._grads = None  # (what they were made for, each member's slices): remade when it changes

    def _member_slices(self, rows) -> list[list[list[torch.Tensor]]]:
        """Each member's slices of each row's tensors (a row's first is the
        parameter, whose owner says which part is whose), as columns:
        `[member][column][parameter]`."""
        members = [[] for _ in range(self.model.k)]
        for p, *others in rows:
            owner = self.model.member_of(p)
            for k in range(self.model.k) if owner is None else (owner,):
                members[k].append([t if owner is not None else t[k] for t in (p, *others)])
        return [[list(column) for column in zip(*own)] for own in members]

    def _live(self) -> list[nn.Parameter]:
        """The parameters with a gradient (torch's Adam skips the others)."""
        return [p for p in self.params if p.grad is not None]

    def grad_slices(self) -> list[list[torch.Tensor]]:
        """Each member's slices of the gradients (views, remade only when a gradient tensor is new)."""
        live = self._live()
        grads = [p.grad for p in live]
        made_for = self._grads[0] if self._grads else []
        if len(grads) != len(made_for) or any(a is not b for a, b in zip(grads, made_for)):
            self._grads = grads, [own[1] for own in self._member_slices([(p, p.grad) for p in live])]
        return self._grads[1]

    @torch.no_grad()
    def clip(self, max_norm: float) -> torch.Tensor:
        """torch's clip_grad_norm_ for each member over its own gradients; returns
        the members' norms before clipping (K,), on the device."""
        slices = self.grad_slices()
        norms = torch.stack(torch._foreach_norm([g for own in slices for g in own]))
        norms = torch.stack([torch.linalg.vector_norm(part) for part in norms.split([len(own) for own in slices])])
        coef = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
        for k, own in enumerate(slices):
            torch._foreach_mul_(own, coef[k])
        return norms

    @torch.no_grad()
    def step(self, rates: dict[int, float]) -> None:
        """One step of every member, member k at rate `rates[k]`; a member not in
        `rates` (failed) stays: its moments move, its parameters do not."""
        (beta1, beta2), self.steps = self.betas, self.steps + 1
        correction1, correction2_sqrt = 1 - beta1**self.steps, (1 - beta2**self.steps) ** 0.5
        live = self._live()
        grads = [p.grad for p in live]
        avgs, squares = ([self.state[id(p)][i] for p in live] for i in (0, 1))
        denoms = [self.denoms[id(p)] for p in live]
        torch._foreach_lerp_(avgs, grads, 1 - beta1)
        torch._foreach_mul_(squares, beta2)
        torch._foreach_addcmul_(squares, grads, grads, value=1 - beta2)
        torch._foreach_copy_(denoms, squares)
        torch._foreach_sqrt_(denoms)
        torch._foreach_div_(denoms, correction2_sqrt)
        torch._foreach_add_(denoms, self.eps)
        if self._adam is None or self._adam[0] != [id(p) for p in live]:
            self._adam = [id(p) for p in live], self._member_slices(list(zip(live, avgs, denoms)))
        params, numerators, divisors, sizes = [], [], [], []
        for k, rate in rates.items():
            own_params, own_avgs, own_denoms = self._adam[1][k]
            params += own_params
            numerators += own_avgs
            divisors += own_denoms
            sizes += [-rate / correction1] * len(own_params)
        if params:
            torch._foreach_addcdiv_(params, numerators, divisors, sizes)

    def zero_grad(self) -> None:
        grads = [p.grad for p in self._live()]
        if grads:
            torch._foreach_zero_(grads)

    def moments(self, p: nn.Parameter, index: Optional[int]) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """A member's first and second moments of `p` (its slice `index` where stacked; views)."""
        if id(p) not in self.state:
            return None
        return tuple(m if index is None else m[index] for m in self.state[id(p)])


def array_key(config: TrialConfig) -> dict:
    """What must be equal for trials to train as one array: all they train but the
    rate and the seed (and the name's label)."""
    trains = what_trains(config.model_dump(mode="json"))
    trains["train"] = {k: v for k, v in trains["train"].items() if k not in ("lr", "seed")}
    return trains


class TrialArray:
    """K trials of one `array_key`, trained as one `ArrayModel`. `step()` trains
    each active member on its next batch; `member_model(k)` is member k as a lone
    model (its evaluation runs the lone trial's code). `failed` maps a member to
    the NonFiniteLoss that ended it."""

    def __init__(self, configs: list[TrialConfig | dict], names: Optional[list[str]] = None):
        configs = [TrialConfig.model_validate(c) for c in configs]
        self.names = list(names) if names else [c.name for c in configs]  # the members' trial names (their folders)
        for other in configs[1:]:
            if array_key(other) != array_key(configs[0]):
                differ = "; ".join(differences(array_key(configs[0]), array_key(other), held=configs[0].name))
                raise ValueError(f"{other.name} cannot train in one array with {configs[0].name}: {differ}")
        self.trials = [Trial(c) for c in configs]  # each model built under its own seed, as alone
        self.model = ArrayModel([t.model for t in self.trials]).to(self.trials[0].device)
        self.optimizer = MemberAdam(self.model)
        self.samples, self.failed = 0, {}
        # A micro-batch's fixed cost (launches, Python per layer) is shared by K members' rows.
        self.group_overhead = overhead_tokens(self.trials[0].device.type, self.k * self.trials[0].model.num_params())
        tc = configs[0].train
        self.warmup_steps, self.total_steps = max(1, tc.warmup_samples // tc.batch_size), math.ceil(tc.samples / tc.batch_size)

    @property
    def k(self) -> int:
        return len(self.trials)

    def batches(self) -> tuple[list[Batch], list[int]]:
        """The members' next batches as length-grouped micro-batches of K*b rows
        (each member's rows sorted by length, grouped on the widest member's length
        at each place, workloads/batching.py), and each member's supervised tokens."""
        tc = self.trials[0].config.train
        count = min(tc.batch_size, tc.samples - self.samples)
        own = [t.task.batch(t.config.train.seed, TRAIN_STREAM, self.samples, count) for t in self.trials]
        orders = [np.argsort(-b.lengths.numpy(), kind="stable") for b in own]
        widest = np.max([b.lengths.numpy()[order] for b, order in zip(own, orders)], axis=0)  # non-increasing
        groups = group_rows(widest, tc.length_groups, self.group_overhead)
        if len(groups) == 1:  # one pass: each member's rows in its batch's order, as its lone trial runs them
            orders, groups = [np.arange(count)] * len(own), [np.arange(count)]
        parts = []
        for places in groups:
            width = int(widest[places].max())
            rows = [b.rows(order[places], width) for b, order in zip(own, orders)]
            parts.append(Batch(*(None if t[0] is None else torch.cat(t) for t in zip(
                *((r.tokens, r.supervised, r.lengths, r.labels, r.targets) for r in rows)))))
        self.step_tokens = [int(b.lengths.sum()) for b in own]  # counted on the CPU copies: no GPU sync
        return parts, [int(b.supervised[:, 1:].sum()) for b in own]

    def step(self) -> torch.Tensor:
        """One optimiser step of every member; returns their losses (K,), detached."""
        tc, device = self.trials[0].config.train, self.trials[0].device
        parts, supervised = self.batches()
        supervised = torch.tensor([max(1, s) for s in supervised], dtype=torch.float32)  # to the GPU without a sync
        supervised = (supervised.pin_memory() if device.type == "cuda" else supervised).to(device, non_blocking=True)
        self.optimizer.zero_grad()
        total = torch.zeros(self.k, device=device)
        for part in parts:
            part = part.to(device)
            with self.trials[0].autocast():
                logits = self.model(part.tokens[:, :-1])
            losses = supervised_loss(logits, part, reduction="none").sum(1).view(self.k, -1).sum(1) / supervised
            losses.sum().backward()
            total += losses.detach()
        if tc.grad_clip is not None:
            self.optimizer.clip(tc.grad_clip)
        factor = lr_factor(self.optimizer.steps, self.warmup_steps, self.total_steps)
        self.optimizer.step({k: self.trials[k].config.train.lr * factor for k in self.active})
        self.samples += sum(len(p.lengths) for p in parts) // self.k
        return total

    @property
    def active(self) -> list[int]:
        """The members still training (not failed)."""
        return [k for k in range(self.k) if k not in self.failed]

    def check(self, losses: torch.Tensor, step: int) -> list[int]:
        """Checks the step losses (K,) or (steps, K) not yet checked, the last row
        at `step`, as a lone trial checks its own: a member with one not finite ends
        (`non_finite_loss`, naming the first, in `failed`); the others' are summed
        into their trial's training loss. Returns the members it ended."""
        recent = losses.detach().reshape(-1, self.k).cpu()
        ended = []
        for k in self.active:
            own, trial = recent[:, k], self.trials[k]
            bad = (~torch.isfinite(own)).nonzero()
            if len(bad):
                self.failed[k] = non_finite_loss(trial.config, own[bad[0]].item(), step - len(own) + 1 + int(bad[0]))
                ended.append(k)
            else:
                trial.loss_sum += float(own.sum())
                trial.loss_steps += len(own)
        return ended

    def resolved(self) -> dict:
        """What the array ran on (Trial.resolved), its scans read where they ran."""
        scans = sorted({m.scan_ran for m in self.model.modules() if getattr(m, "scan_ran", None)})
        return {"device_used": self.trials[0].device.type, "scan_used": "+".join(scans) or "none"}

    @torch.no_grad()
    def to_member(self, k: int) -> Trial:
        """Member k's lone trial (`trials[k]`), given the array's state of it: its
        weights, Adam's moments and step count, its schedule's position and its
        samples. Its checkpoint (`Trial.save`) is then the one its lone trial would
        write, and its evaluation the lone trial's. Its rows, history and training
        loss are kept on it as they happen."""
        trial, steps = self.trials[k], self.optimizer.steps
        own = dict(trial.model.named_parameters())
        device = trial.device if trial.optimizer.defaults.get("fused") else None
        for name, (p, index) in self.model.member_slots(k).items():
            own[name].copy_(p if index is None else p[index])
            moments = self.optimizer.moments(p, index)
            if moments is not None and steps:
                trial.optimizer.state[own[name]] = {"step": torch.tensor(float(steps), device=device),
                                                    "exp_avg": moments[0].clone(), "exp_avg_sq": moments[1].clone()}
        lr = trial.config.train.lr * lr_factor(steps, self.warmup_steps, self.total_steps)
        schedule = trial.scheduler.state_dict()
        schedule.update(last_epoch=steps, _step_count=steps + 1, _last_lr=[lr])
        trial.scheduler.load_state_dict(schedule)
        for group in trial.optimizer.param_groups:
            group["lr"] = lr
        trial.samples = self.samples
        return trial

    @torch.no_grad()
    def from_members(self) -> None:
        """The array's state from its members' lone trials (each restored from its
        checkpoint, `Trial.restore`): the reverse of `to_member`. Every member must
        be at the same step."""
        at = {name: (t.scheduler.last_epoch, t.samples) for name, t in zip(self.names, self.trials)}
        if len(set(at.values())) > 1:
            raise CheckpointError("the members' checkpoints are at different steps ("
                                  + ", ".join(f"{name}: {samples} samples" for name, (_, samples) in at.items())
                                  + "): they cannot continue as one array")
        for k, trial in enumerate(self.trials):
            own, state = dict(trial.model.named_parameters()), trial.optimizer.state
            for name, (p, index) in self.model.member_slots(k).items():
                (p if index is None else p[index]).copy_(own[name])
                moments = self.optimizer.moments(p, index)
                if moments is not None:
                    saved = state.get(own[name], {})
                    for moment, key in zip(moments, ("exp_avg", "exp_avg_sq")):
                        moment.copy_(saved[key]) if key in saved else moment.zero_()
        self.optimizer.steps, self.samples = self.trials[0].scheduler.last_epoch, self.trials[0].samples

    def member_model(self, k: int) -> nn.Module:
        """Member k as a lone model (a copy: training the array does not change it)."""
        lone, state = copy.deepcopy(self.trials[k].model), self.model.member_state(k)
        lone.load_state_dict(state, strict=False)
        missing = {n for n, _ in lone.named_parameters()} - set(state)
        assert not missing, f"parameters the array does not hold: {sorted(missing)}"
        return lone
