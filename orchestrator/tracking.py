"""Checks, before Ray starts, that the trackers a spec turns on can take the sweep:
their package installed, their credentials present, their server answering within
the same wait as remote storage (ICR_STORAGE_TIMEOUT_S, default 20 s). Without
them a tracker fails late (a Ray traceback after start), slowly (minutes of
retries) or silently (exit 0, nothing uploaded). No Ray import."""

import importlib.util
import netrc
import os
import socket
import urllib.error
import urllib.request
from typing import Optional
from urllib.parse import urlsplit

from orchestrator.storage import answer_timeout

WANDB_HOST = "https://api.wandb.ai"  # W&B's cloud; WANDB_BASE_URL names a server of one's own


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
    base = os.environ.get("WANDB_BASE_URL", WANDB_HOST)
    host = urlsplit(base).hostname or base
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
    it), within the wait. A key the server rejects (401, 403, or no viewer) would
    let the sweep run and log nothing, the console ending with the run's URL."""
    import base64
    import json

    request = urllib.request.Request(
        base.rstrip("/") + "/graphql", data=json.dumps({"query": "query { viewer { id } }"}).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=answer_timeout()) as answer:
            body = answer.read(1 << 16)
    except urllib.error.HTTPError as e:
        return f"rejected the API key (HTTP {e.code})" if e.code in (401, 403) else ""
    except (OSError, ValueError) as e:
        return _why_unanswered(e)
    try:
        data = json.loads(body).get("data")
    except (ValueError, AttributeError):
        return ""  # an answer we cannot read: the server is there
    if isinstance(data, dict) and "viewer" in data and data["viewer"] is None:
        return "rejected the API key (it knows no user of it)"
    return ""


def _netrc_password(host: str) -> Optional[str]:
    try:
        entry = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return entry[2] if entry else None


def _check_mlflow(uri: str) -> None:
    if urlsplit(uri).scheme in ("http", "https"):
        problem = _unanswered(uri.rstrip("/") + "/health")
        if problem:
            raise TrackerError(f"tracking.mlflow.tracking_uri: {uri} {problem}; start the MLflow server "
                               "(`mlflow server`), or drop tracking_uri to log into the run directory")


def _unanswered(url: str) -> str:
    """'' when `url`'s server answers a request within the wait, else what went
    wrong. Any HTTP answer counts (a 401 or 404 is a server that is there); a
    connection alone does not (a server may accept one and never answer)."""
    try:
        try:
            urllib.request.urlopen(url, timeout=answer_timeout()).close()
        except urllib.error.HTTPError:
            pass
    except (OSError, ValueError) as e:
        return _why_unanswered(e)
    return ""


def _why_unanswered(e: Exception) -> str:
    reason = getattr(e, "reason", None) or e
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return f"did not answer within {answer_timeout():g} s (ICR_STORAGE_TIMEOUT_S sets the wait)"
    return f"cannot be reached ({reason})"
