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
    if not (os.environ.get("WANDB_API_KEY") or _netrc_password(host)):
        raise TrackerError(f"tracking.wandb.mode online: no W&B API key (WANDB_API_KEY is unset and ~/.netrc has no "
                           f"entry for {host}); run `wandb login`, or set mode: offline and `wandb sync` later")
    problem = _unanswered(base)
    if problem:
        raise TrackerError(f"tracking.wandb.mode online: {base} {problem}; check the network, or set mode: offline "
                           "and `wandb sync` later")


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
    wait = answer_timeout()
    try:
        try:
            urllib.request.urlopen(url, timeout=wait).close()
        except urllib.error.HTTPError:
            pass
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return f"did not answer within {wait:g} s (ICR_STORAGE_TIMEOUT_S sets the wait)"
        return f"cannot be reached ({reason})"
    return ""
