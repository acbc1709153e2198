"""Mamba (v1) layer: in/out projections, depthwise causal conv, selective scan.

One module, parameter for parameter the layout of mamba-ssm's `Mamba`, with three
ways to run the scan (the config's `scan`): mamba-ssm's CUDA kernel on a GPU, our
compiled kernel on CPU, or the step-by-step reference, only when asked for. On a
GPU without mamba-ssm the model refuses to build rather than fall back to the
reference scan (tens of GB and days per long trial). mamba-ssm is imported
lazily: `import mamba_ssm` fails outright without its compiled CUDA extension.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.mamba import MambaConfig
from workloads.models.recurrent_parts import (dt_bias_init, mimetic_, optional_kernel, residual_out_proj, short_conv,
                                              short_conv_step)
from workloads.models.mamba.selective_scan import scan_cpu, scan_reference

def _import_mamba_ssm_scan():
    return optional_kernel("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn")


def mamba_ssm_scan():
    """mamba-ssm's selective_scan_fn, or None where it does not import."""
    return _import_mamba_ssm_scan()[0]


def require_scan_kernels(cfg: MambaConfig, device) -> None:
    """Refuses Mamba layers that would run the reference scan on a GPU without
    being asked to: mamba-ssm must import there."""
    if torch.device(device).type != "cuda" or cfg.scan not in ("auto", "cuda"):
        return
    kernel, error = _import_mamba_ssm_scan()
    if kernel is None:
        raise RuntimeError(
            f"Mamba on CUDA needs mamba-ssm's selective-scan kernel, which does not import here ({error}). "
            "Install it on this host with `ICR_EXTRAS=dev,cuda scripts/setup-env` "
            "(pip install --no-build-isolation -e '.[cuda]'), or set the model's scan: reference to run the "
            "step-by-step scan on purpose (very slow)"
        )


@dataclass
class MambaCache:
    conv: torch.Tensor  # (B, d_inner, d_conv - 1): the conv's most recent inputs
    ssm: torch.Tensor  # (B, d_inner, d_state)
    filled: bool = False


class MambaMixer(nn.Module):
    """Arguments as MambaConfig's fields; n_layers, the model's Mamba layers, scales
    out_proj at init. norm_eps is taken like every mixer's: Mamba has no norm inside."""

    check_device = staticmethod(require_scan_kernels)  # what MambaConfig.check_device asks before a trial runs

    def __init__(self, d_model: int, d_state: int = 16, d_conv: int = 4, expand: int = 2, scan: str = "auto",
                 init: str = "default", mimetic: str = "decay_bc_conv", n_layers: int = 1, norm_eps: float = 1e-5):
        super().__init__()
        d_inner, n_state, dt_rank = expand * d_model, d_state, -(-d_model // 16)  # dt_rank: ceil(d_model / 16)
        self.d_inner, self.d_state, self.dt_rank, self.d_conv = d_inner, n_state, dt_rank, d_conv
        self.scan_impl = scan
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner)  # weights only: short_conv pads
        self.x_proj = nn.Linear(d_inner, dt_rank + 2 * n_state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, d_inner, bias=True)
        # S4D-real initialisation of A and Mamba's dt initialisation (dt in [1e-3, 1e-1]).
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n_state + 1, dtype=torch.float32)).repeat(d_inner, 1))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = residual_out_proj(d_inner, d_model, n_layers)  # mamba-ssm's MixerModel init
        nn.init.uniform_(self.dt_proj.weight, -(dt_rank**-0.5), dt_rank**-0.5)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt_bias_init(d_inner))
        if init == "mimetic":  # x_proj's rows: dt's, then B's, then C's
            b_rows, c_rows = slice(dt_rank, dt_rank + n_state), slice(dt_rank + n_state, dt_rank + 2 * n_state)
            mimetic_(mimetic, self.A_log, self.dt_proj.bias, [(self.x_proj.weight, b_rows, c_rows)], [self.conv1d])

    def new_cache(self, batch: int, like: torch.Tensor) -> MambaCache:
        return MambaCache(
            conv=like.new_zeros(batch, self.d_inner, self.d_conv - 1),
            ssm=like.new_zeros(batch, self.d_inner, self.d_state, dtype=torch.float32),
        )

    def _impl(self, x: torch.Tensor) -> str:
        if self.scan_impl != "auto":
            return self.scan_impl
        if x.device.type == "cpu":
            return "cpu"
        if mamba_ssm_scan() is None:
            raise RuntimeError(f"no fast selective scan on {x.device}: install mamba-ssm, or set scan: reference")
        return "cuda"

    def forward(self, h: torch.Tensor, cache: MambaCache | None = None) -> torch.Tensor:
        if cache is not None and cache.filled:
            return self.step(h, cache)
        x, z = self.in_proj(h).chunk(2, dim=-1)
        x = short_conv(x, self.conv1d, cache)
        dt, Bm, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        A = -torch.exp(self.A_log.float())
        impl = self._impl(x)
        if self.training:  # what trained (evaluation may run another form)
            self.scan_ran = {"cuda": "mamba-ssm"}.get(impl, impl)  # what ran: cpu (compiled), reference, mamba-ssm
        if impl == "cuda":
            y, last = self._scan_cuda(x, dt, A, Bm, C, z)
        else:
            dt = F.softplus(self.dt_proj(dt))
            scan = scan_cpu if impl == "cpu" else scan_reference
            y, last = scan(x.float(), dt.float(), A, Bm.float(), C.float())
            y = (y.to(x.dtype) + x * self.D) * F.silu(z)
        if cache is not None:
            cache.ssm, cache.filled = last.float(), True
        return self.out_proj(y)

    def _scan_cuda(self, x, dt, A, Bm, C, z):
        """mamba-ssm's fused kernel: softplus, D skip and gate happen inside it."""
        dt = (dt @ self.dt_proj.weight.T).transpose(1, 2)  # bias is applied in the kernel
        y, last = mamba_ssm_scan()(
            x.transpose(1, 2).contiguous(), dt.contiguous(), A,
            Bm.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous(),
            D=self.D.float(), z=z.transpose(1, 2).contiguous(),
            delta_bias=self.dt_proj.bias.float(), delta_softplus=True, return_last_state=True,
        )
        return y.transpose(1, 2), last

    def step(self, h: torch.Tensor, cache: MambaCache) -> torch.Tensor:
        """One token, h of shape (B, 1, d_model); advances the cache."""
        x, z = self.in_proj(h[:, 0]).chunk(2, dim=-1)
        x = short_conv_step(x, self.conv1d, cache)
        dt, Bm, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(self.dt_proj(dt)).float()
        A = -torch.exp(self.A_log.float())
        cache.ssm = torch.exp(dt[..., None] * A) * cache.ssm + (dt * x.float())[..., None] * Bm.float()[:, None, :]
        y = (cache.ssm * C.float()[:, None, :]).sum(-1).to(x.dtype) + self.D * x
        return self.out_proj(y * F.silu(z))[:, None]
