"""Checks, before Ray starts, that the trackers a spec turns on can take the sweep:
their package installed, their credentials present, their server answering within
the same wait as remote storage (ICR_STORAGE_TIMEOUT_S, default 20 s). Without
them a tracker fails late (a Ray traceback after start), slowly (minutes of
retries) or silently (exit 0, nothing uploaded). No Ray import."""

import importlib.util
import netrc
import os
from typing import Optional
from urllib.parse import urlsplit

from orchestrator.secrets import NotAURL, ask, parts, redact, where_to
from orchestrator.storage import answer_timeout

WANDB_HOST = "https://api.wandb.ai"  # W&B's cloud; WANDB_BASE_URL names a server of one's own


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


class TrackerError(ValueError):
    """A tracker of the spec cannot be used; the message names the field and the fix."""


def check_trackers(tracking, mlflow_uri: Optional[str]) -> None:
    """Raises TrackerError for the first tracker of `tracking` that cannot be used;
    `mlflow_uri` is the tracking URI the sweep would log to."""
    for name, package in (("wandb", "wandb"), ("mlflow", "mlflow")):
        if getattr(tracking, name) and importlib.util.find_spec(package) is None:
            raise TrackerError(f"tracking.{name}: the {package} package is not installed here; "
                               f"pip install 'icr-sweep[track]' (or {package})")
    if tracking.wandb and tracking.wandb.mode == "online":
        _check_wandb_online()
    if tracking.mlflow:
        if mlflow_uri is None:
            raise TrackerError("tracking.mlflow.tracking_uri: a remote run directory needs one (an MLflow server, "
                               "say); the default file store is for local runs")
        _check_mlflow(mlflow_uri)


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


def _check_mlflow(uri: str) -> None:
    if urlsplit(uri).scheme not in ("http", "https"):
        return
    try:
        url, user = parts(uri)
    except NotAURL as e:
        raise TrackerError(f"tracking.mlflow.tracking_uri {e}") from None
    problem = _mlflow_unanswered(url, user)
    if problem:
        raise TrackerError(f"tracking.mlflow.tracking_uri: {redact(uri)} {problem}; start the MLflow server "
                           "(`mlflow server`), or drop tracking_uri to log into the run directory")


def _mlflow_unanswered(url: str, user: Optional[tuple[str, str]]) -> str:
    """'' when an MLflow server answers at `url` within the wait (its /health says
    OK; a 401 or 403 without credentials is one that asks for MLflow's own), else
    what it answered. Credentials given in the URI go as basic auth, to that host alone."""
    import base64

    headers = {"Authorization": "Basic " + base64.b64encode(":".join(user).encode()).decode()} if user else {}
    answer = ask(url.rstrip("/") + "/health", answer_timeout(), headers=headers)
    if isinstance(answer, str):
        return answer
    status, headers, body = answer
    if 300 <= status < 400:
        return f"answered {where_to(status, headers, url)} (not followed: name the server's own address)"
    if status in (401, 403):
        return f"refused the user and password given in it (HTTP {status})" if user else ""
    if status != 200:
        return f"answered HTTP {status} at /health: no MLflow server that works now"
    if body.strip() != b"OK":
        return "answered, but not as an MLflow server does (its /health says OK): is it one?"
    return ""
