"""The mimetic initialisation of Mamba and Mamba-2 (issues 62 and 81; Trockman et al.
2024, arXiv 2410.11135): what it promises of the initial layer, checked on the layer's
own weights, projections and scan. At init the layer is causal linear attention: the
state barely decays (exp(dt * A) near 1 over a sequence), C_t is B_t's near copy at
every token (correlated, not equal), the short convolution is the identity, and the
scan's output is the no-decay form sum_s (C_t . B_s) dt_s x_s. The default init
promises none of it. Each part (decay, bc, conv) alone changes its own weights and
nothing else, draw for draw, and leaves torch's generator as it was."""

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


def _build(kind: str, init: str, parts: str = "decay_bc_conv"):
    torch.manual_seed(0)
    if kind == "mamba":
        return MambaMixer(d_model=32, d_state=8, init=init, mimetic=parts, n_layers=3)
    return Mamba2Mixer(d_model=32, d_state=8, headdim=16, init=init, mimetic=parts, n_layers=3)


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
        assert 0.3 < dt.median() < 3  # dt near 1
        # every token's query near its key, not equal to it: C_t . B_t near |B_t|^2, C_t - B_t small
        assert not torch.equal(C, B) and (C - B).norm() / B.norm() < 0.3
        assert F.cosine_similarity(C, B, dim=-1).min() > 0.9
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


def _c_and_b_rows(kind: str, state: dict) -> list[tuple[str, slice, slice]]:
    """(parameter, B's rows, C's rows) of the layer built by _build (d_model 32, d_state 8)."""
    if kind == "mamba":
        dt_rank = 2  # ceil(32 / 16)
        return [("x_proj.weight", slice(dt_rank, dt_rank + 8), slice(dt_rank + 8, dt_rank + 16))]
    d_inner = 64
    return [("in_proj.weight", slice(2 * d_inner, 2 * d_inner + 8), slice(2 * d_inner + 8, 2 * d_inner + 16))]


@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
@pytest.mark.parametrize("parts", ["decay_bc_conv", "decay", "bc", "conv", "decay_bc", "bc_conv"])
def test_each_part_of_the_mimetic_init_sets_its_own_weights_and_nothing_else_draw_for_draw(kind, parts):
    chosen = set(parts.split("_"))
    default = _build(kind, "default").state_dict()
    after_default = torch.rand(3)
    mimetic = _build(kind, "mimetic", parts).state_dict()
    assert torch.equal(torch.rand(3), after_default)  # torch's generator where the default init left it
    changed = {name for name in default if not torch.equal(default[name], mimetic[name])}
    dt_bias = "dt_proj.bias" if kind == "mamba" else "dt_bias"
    (weight, b, c), = _c_and_b_rows(kind, mimetic)
    expected = ({"A_log", dt_bias} if "decay" in chosen else set()) | ({weight} if "bc" in chosen else set()) | (
        {"conv1d.weight", "conv1d.bias"} if "conv" in chosen else set())
    if kind == "mamba2" and "bc" in chosen and "conv" not in chosen:
        expected |= {"conv1d.weight", "conv1d.bias"}  # its conv's C channels follow B's
    assert changed == expected, (changed, expected)
    if "decay" in chosen:
        assert torch.equal(mimetic["A_log"], torch.full_like(mimetic["A_log"], -8.0))
        torch.testing.assert_close(F.softplus(mimetic[dt_bias]), torch.ones_like(mimetic[dt_bias]))
    if "bc" in chosen:  # C's rows: B's plus noise of a tenth of their spread; every other row as it was
        rows = mimetic[weight]
        noise = rows[c] - rows[b]
        assert 0.07 < (noise.std() / rows[b].std()).item() < 0.13 and abs(noise.mean().item()) < 0.05 * rows[b].std()
        kept = torch.ones(rows.shape[0], dtype=torch.bool)
        kept[c] = False
        assert torch.equal(rows[kept], default[weight][kept])
    if "conv" in chosen:  # the identity: the last tap 1, every other tap and the bias 0
        conv = mimetic["conv1d.weight"]
        assert torch.equal(conv[..., -1], torch.ones_like(conv[..., -1])) and not conv[..., :-1].any()
        assert not mimetic["conv1d.bias"].any()


def test_mimetic_parts_without_the_mimetic_init_are_refused_with_the_field_named():
    from pydantic import ValidationError

    from workloads.models.mamba import MambaConfig

    assert MambaConfig(init="mimetic", mimetic="decay_bc").mimetic == "decay_bc"
    with pytest.raises(ValidationError, match="mimetic: 'decay' names parts of the mimetic init, but init is 'default'"):
        MambaConfig(mimetic="decay")
    with pytest.raises(ValidationError, match="decay_bc_conv"):  # a part that does not exist: the allowed values
        MambaConfig(init="mimetic", mimetic="decay_gate")


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
