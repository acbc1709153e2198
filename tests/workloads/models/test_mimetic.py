"""The mimetic initialisation of Mamba and Mamba-2 (issue 62; Trockman et al. 2024,
arXiv 2410.11135): what it promises of the initial layer, checked on the layer's
own projections and scan. At init the layer is causal linear attention with its
queries equal to its keys: the state barely decays (exp(dt * A) near 1 over a
sequence), C_t equals B_t at every token, and the scan's output is the
no-decay form sum_s (C_t . B_s) dt_s x_s. The default init promises none of it.
The recipe changes only A, the time step's bias and C's rows, draw for draw."""

import pytest
import torch
import torch.nn.functional as F

from workloads.models import preset
from workloads.models.lm import SequenceModel
from workloads.models.mamba.layer import MambaMixer
from workloads.models.mamba.selective_scan import scan_reference
from workloads.models.mamba2.layer import Mamba2Mixer, ssd_recurrent
from workloads.models.recurrent_parts import short_conv

LENGTH = 32


def _mamba_parts(mixer: MambaMixer, h: torch.Tensor):
    """Mamba's scan inputs for h, as its forward makes them: x, dt, A, B, C."""
    x, _ = mixer.in_proj(h).chunk(2, dim=-1)
    x = short_conv(x, mixer.conv1d)
    dt, B, C = mixer.x_proj(x).split([mixer.dt_rank, mixer.d_state, mixer.d_state], dim=-1)
    return x, F.softplus(mixer.dt_proj(dt)), -torch.exp(mixer.A_log), B, C


def _mamba2_parts(mixer: Mamba2Mixer, h: torch.Tensor):
    """Mamba-2's scan inputs for h, as its forward makes them: x (heads), dt, A, B, C."""
    _, xBC, dt = mixer.in_proj(h).split([mixer.d_inner, mixer.conv_dim, mixer.heads], dim=-1)
    x, B, C = mixer._split(short_conv(xBC, mixer.conv1d))
    return x, F.softplus(dt + mixer.dt_bias), -torch.exp(mixer.A_log), B, C


def _build(kind: str, init: str):
    torch.manual_seed(0)
    if kind == "mamba":
        return MambaMixer(d_model=32, d_state=8, init=init, n_layers=3)
    return Mamba2Mixer(d_model=32, d_state=8, headdim=16, init=init, n_layers=3)


def _parts(kind: str, mixer, h):
    return (_mamba_parts if kind == "mamba" else _mamba2_parts)(mixer, h)


def _scan(kind: str, x, dt, A, B, C):
    """The layer's own scan, its output before the skip and the gate."""
    if kind == "mamba":
        return scan_reference(x, dt, A, B, C)[0]
    return ssd_recurrent(x, dt, A, B, C)[0]


def _linear_attention(kind: str, x, dt, B, C):
    """sum over s <= t of (C_t . B_s) dt_s x_s: the scan with no decay."""
    scores = torch.einsum("btn,bsn->bts", C, B).tril()
    if kind == "mamba":
        return torch.einsum("bts,bsc->btc", scores, dt * x)
    return torch.einsum("bts,bshp->bthp", scores, dt[..., None] * x)


def _tokens():
    return torch.randn(2, LENGTH, 32, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_mimetic_init_starts_the_layer_as_linear_attention_with_queries_equal_to_keys(kind):
    mixer = _build(kind, "mimetic")
    with torch.no_grad():
        x, dt, A, B, C = _parts(kind, mixer, _tokens())
        decay = torch.exp(dt[..., None] * A) if kind == "mamba" else torch.exp(dt * A)
        assert decay.min() > 0.99  # the state keeps (nearly) the whole context
        assert (0.3 < dt.median() < 3) and torch.equal(C, B)  # dt near 1; every token's query is its key
        y, attention = _scan(kind, x, dt, A, B, C), _linear_attention(kind, x, dt, B, C)
    assert (y - attention).norm() / attention.norm() < 0.02


@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_the_default_init_promises_none_of_it(kind):
    """The check above can fail: at the authors' init the state decays within a few
    tokens, C is not B, and the scan is far from the no-decay form."""
    mixer = _build(kind, "default")
    with torch.no_grad():
        x, dt, A, B, C = _parts(kind, mixer, _tokens())
        decay = torch.exp(dt[..., None] * A) if kind == "mamba" else torch.exp(dt * A)
        assert decay.min() < 0.5 and dt.median() < 0.2 and not torch.allclose(C, B, atol=0.1)
        y, attention = _scan(kind, x, dt, A, B, C), _linear_attention(kind, x, dt, B, C)
    assert (y - attention).norm() / attention.norm() > 0.3


@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_mimetic_init_changes_only_a_the_time_step_and_cs_rows_draw_for_draw(kind):
    default, mimetic = (_build(kind, init).state_dict() for init in ("default", "mimetic"))
    changed = {name for name in default if not torch.equal(default[name], mimetic[name])}
    if kind == "mamba":
        assert changed == {"A_log", "dt_proj.bias", "x_proj.weight"}
        rows = mimetic["x_proj.weight"]
        dt_rank, n = rows.shape[0] - 2 * 8, 8
        torch.testing.assert_close(rows[:dt_rank + n], default["x_proj.weight"][:dt_rank + n], rtol=0, atol=0)
        assert torch.equal(rows[dt_rank + n:], rows[dt_rank:dt_rank + n])  # C's rows are B's
    else:
        assert changed == {"A_log", "dt_bias", "in_proj.weight", "conv1d.weight", "conv1d.bias"}
        d_inner = 64
        c_rows = slice(2 * d_inner + 8, 2 * d_inner + 16)  # in in_proj: z, x, B, then C
        kept = torch.ones(mimetic["in_proj.weight"].shape[0], dtype=torch.bool)
        kept[c_rows] = False
        assert torch.equal(mimetic["in_proj.weight"][kept], default["in_proj.weight"][kept])
        assert torch.equal(mimetic["conv1d.weight"][d_inner + 8:], mimetic["conv1d.weight"][d_inner:d_inner + 8])
    assert torch.equal(mimetic["A_log"], torch.full_like(mimetic["A_log"], -8.0))


@pytest.mark.parametrize("arch", ["mamba", "hybrid", "mamba2", "mamba2_hybrid"])
def test_a_model_with_mimetic_init_has_it_in_every_recurrent_layer_and_keeps_its_other_layers(arch):
    config = preset(arch, "tiny")
    torch.manual_seed(0)
    default = SequenceModel(config, vocab_size=40).state_dict()
    torch.manual_seed(0)
    model = SequenceModel(config.variant({"init": "mimetic"}), vocab_size=40)
    mixers = [layer.mixer for layer in model.layers if hasattr(layer, "mixer")]
    assert len(mixers) == config.n_recurrent_layers and all((m.A_log == -8.0).all() for m in mixers)
    attention = {k for k in default if k.startswith(tuple(f"layers.{i}." for i in config.attn_layer_idx))}
    assert all(torch.equal(default[k], model.state_dict()[k]) for k in attention)  # the hybrid's layer: as before
