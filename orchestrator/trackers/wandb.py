"""W&B: one run per trial, through Ray Tune's W&B callback (its logging actors),
offline into the run directory's wandb/ folder by default (`wandb sync` uploads
it), or online to W&B's cloud or a server of one's own (WANDB_BASE_URL)."""

from __future__ import annotations

import functools
import netrc
import os
import sys
from pathlib import Path
from typing import Literal, Optional
from urllib.parse import urlsplit

from pydantic import Field

from orchestrator.secrets import NotAURL, ask, command, parts, where_to
from orchestrator.shell import missing
from orchestrator.spec.section import Section
from orchestrator.storage import answer_timeout, is_remote
from orchestrator.trackers import Launch, Shown, Tracker, TrackerError, made_on_first_use, register
from orchestrator.unpromised import WANDB_SAID, wandb_callback

WANDB_HOST = "https://api.wandb.ai"  # W&B's cloud; WANDB_BASE_URL names a server of one's own


class WandbSpec(Section):
    project: str = Field(min_length=1, description="the W&B project")
    mode: Literal["offline", "online"] = Field(
        "offline", description="offline: run files on disk only (`wandb sync` uploads them later); online: needs "
        "WANDB_API_KEY or `wandb login`")
    entity: Optional[str] = Field(None, description="the W&B team or user; default: your default entity")
    group: Optional[str] = Field(None, description="default: the sweep's name")
    dir: Optional[str] = Field(None, description="where W&B writes (<dir>/wandb/); default: the run directory when "
                               "local, else the driver's trial folders")


def wandb_app() -> str:
    """Where W&B's web app shows a project's runs: W&B's cloud, https://wandb.ai,
    unless WANDB_BASE_URL names a server of one's own, whose app is at that URL
    (without its user info); the report named wandb.ai for a server of one's own
    (issue 83, class 9)."""
    try:
        base, _ = parts(os.environ.get("WANDB_BASE_URL", WANDB_HOST))
    except NotAURL:
        base = WANDB_HOST
    return "https://wandb.ai" if urlsplit(base).hostname == urlsplit(WANDB_HOST).hostname else base.rstrip("/")


def _check_wandb_online() -> None:
    raw = os.environ.get("WANDB_BASE_URL", WANDB_HOST)
    try:
        base, _ = parts(raw)  # user info in it is W&B's business, never this check's
    except NotAURL as e:
        raise TrackerError(f"tracking.wandb.mode online: WANDB_BASE_URL {e}; unset it for W&B's cloud, or name your "
                           "W&B server") from None
    host = urlsplit(base).hostname
    key = os.environ.get("WANDB_API_KEY") or _netrc_password(host)
    if not key:
        raise TrackerError(f"tracking.wandb.mode online: no W&B API key (WANDB_API_KEY is unset and ~/.netrc has no "
                           f"entry for {host}); run `wandb login`, or set mode: offline and `wandb sync` later")
    problem = _wandb_refuses(base, key)
    if problem:
        raise TrackerError(f"tracking.wandb.mode online: {base} {problem}; check the network and the key (`wandb "
                           "login --relogin`), or set mode: offline and `wandb sync` later")


def _wandb_refuses(base: str, key: str) -> str:
    """'' when W&B's server at `base` takes `key`, else why not: one request that
    needs the key (its API's `viewer`, the key as HTTP basic auth, as wandb sends
    it), to that host alone (a redirect is not followed with the key), within the
    wait. A key the server rejects (401, 403, or no viewer), a server that fails
    (5xx) or that answers what W&B's API never does, would let the sweep run and
    log nothing, the console ending with the run's URL."""
    import base64
    import json

    answer = ask(base.rstrip("/") + "/graphql", answer_timeout(),
                 data=json.dumps({"query": "query { viewer { id } }"}).encode(),
                 headers={"Content-Type": "application/json",
                          "Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode()})
    if isinstance(answer, str):
        return answer
    status, headers, body = answer
    if 300 <= status < 400:
        return (f"answered {where_to(status, headers, base)}; the key is not sent on there: set WANDB_BASE_URL to "
                "the W&B server's own address")
    if status in (401, 403):
        return f"rejected the API key (HTTP {status})"
    if status != 200:
        return f"answered HTTP {status}: no W&B server that works now"
    try:
        viewer = json.loads(body)["data"]["viewer"]
    except (ValueError, KeyError, TypeError):
        return "answered, but not as W&B's API does (no viewer in its reply): is it a W&B server?"
    if viewer is None:
        return "rejected the API key (it knows no user of it)"
    return "" if isinstance(viewer, dict) else "answered, but not as W&B's API does (its viewer is no user)"


def _netrc_password(host: str) -> Optional[str]:
    try:
        entry = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return entry[2] if entry else None


def wandb_failed(trial_dir: str, error: Exception) -> None:
    """W&B's logging of a trial ended on `error` (in its logging actor: a server that
    refuses the run, an init that timed out): said on the console once per sweep,
    the first error kept in the run directory (WANDB_FAILED), which the console's
    closing lines and the report read. The sweep goes on."""
    from orchestrator.rundir import WANDB_FAILED
    from orchestrator.secrets import redact

    text = redact(f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300] if str(error).strip() else ''}")
    try:
        fd = os.open(Path(trial_dir).parent / WANDB_FAILED, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # said already
    except OSError:
        fd = None  # a remote run directory: said for each trial whose logging fails
    if fd is not None:
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
    print(f"{WANDB_SAID} {Path(trial_dir).name} ({text}); W&B will hold no more of this sweep's "
          "trials that meet it. The sweep goes on; its results are in its run directory", file=sys.stderr, flush=True)


@functools.cache
def wandb_tracker() -> type:
    """The W&B tracker's class, `Wandb`, made once, on first use (a spec with W&B on,
    an unpickled callback): Ray's W&B callback imports wandb, which a sweep without
    W&B imported for nothing (0.4 s of every launch's and resume's start)."""
    from orchestrator.trackers.common import STEP, logged_once_per_member, resolved, tracked_metrics, trial_params

    class Wandb(wandb_callback(tracked_metrics, STEP, charts=("train/*", "val/*", "test/*"), trial_dir="trial_dir",
                                   config=resolved, failed=wandb_failed)):
        """One W&B run per trial, named after it (its id too: an offline run's folder,
        offline-run-<time>-<trial>-<tune id>, is found by the trial's name), with the
        flat config; samples are every chart's step."""

        def __init__(self, *args, swept: tuple[str, ...] = (), **kwargs):
            super().__init__(*args, **kwargs)
            self.swept = swept

        def log_trial_start(self, trial) -> None:
            name = str(trial)
            run_id = f"{name.replace('.', '_')}-{trial.trial_id}"  # W&B ids take no dots
            # W&B's own lines (its banner, sync hints, a summary per run) stay in its
            # logs under the run directory: the console says where they are once.
            self.start_run(trial, id=run_id, name=name, resume="allow", reinit="finish_previous", allow_val_change=True,
                           group=self.group or trial.experiment_dir_name, project=self.project,
                           config=trial_params(trial, self.swept), settings={"silent": True}, **self.kwargs)

    Wandb.__qualname__ = "Wandb"  # pickled by name, as the module's attribute
    return logged_once_per_member(Wandb)



__getattr__ = made_on_first_use(__name__, "Wandb", wandb_tracker)


@register
class WandbTracker(Tracker):
    """`tracking.wandb`: one W&B run per trial, named after it, with the flat config;
    samples are every chart's step."""

    name, section, package = "wandb", WandbSpec, "wandb"
    writes = {"wandb": ("offline-run-*", "run-*", "latest-run", "debug*.log")}

    def check(self, config: WandbSpec, launch: Launch) -> None:
        if config.mode == "online":
            _check_wandb_online()

    def callbacks(self, config: WandbSpec, launch: Launch) -> list:
        if config.mode == "offline":
            os.environ["WANDB_MODE"] = "offline"  # the callback asks for no API key then
        run_dir = launch.run_dir
        where = config.dir or (None if is_remote(run_dir) else str(Path(run_dir).resolve()))
        options = {k: v for k, v in dict(entity=config.entity, dir=where).items() if v}
        # W&B logs from actors of its own, so a server that stops answering holds no
        # trial; at the end Tune waits upload_timeout for them (30 min by default),
        # then ends them: their runs stay in W&B's local folder for `wandb sync`.
        return [wandb_tracker()(project=config.project, group=config.group or launch.spec.name, mode=config.mode,
                                log_config=False, swept=launch.swept, upload_timeout=answer_timeout(), **options)]

    def folders(self, config: WandbSpec, launch: Launch) -> tuple[str, ...]:
        """W&B's folder, where its dir is the run directory (W&B's default)."""
        run_dir = launch.run_dir
        if is_remote(run_dir):
            return ()
        return ("wandb",) if Path(config.dir or run_dir).resolve() == Path(run_dir).resolve() else ()

    def opens(self, config: dict, shown: Shown) -> Optional[str]:
        from orchestrator.rundir import WANDB_FAILED, small_text

        where, spec = shown.where, shown.spec
        if config.get("mode", "offline") == "offline":
            folder = f"{config.get('dir') or where}/wandb"
            line = (f"W&B (offline): `{command('wandb', 'sync', folder)}/offline-run-*`, then the project "
                    f"{config['project']}; here, without upload: `{command('wandb', 'beta', 'leet', folder)}`"
                    + missing("wandb"))
        else:
            entity = f"{config['entity']}/" if config.get("entity") else ""
            line = f"W&B: {wandb_app()}/{entity}{config['project']} (group {config.get('group') or spec.get('name')})"
        failed = small_text(shown.local / WANDB_FAILED).strip()
        return line + (f"; W&B stopped logging some of its trials: {failed}" if failed else "")
