"""The Ray a sweep runs on: an embedded local Ray with its dashboard, or a cluster
at an address (checked to answer), and the resources each trial asks of it."""

import ipaddress
import os
import socket
from pathlib import Path
from typing import Callable, Optional

import ray

from orchestrator.packing import gpu_shares, nvidia_smi
from orchestrator.privatedir import (PrivateFolderError, Session, end_orphans, one_start_at_a_time, private_base,
                                     start_lock_folder)
from orchestrator.spec import SweepSpec
from orchestrator.unpromised import (autoscaler_node_groups, daemons_in_a_group_of_their_own, no_idle_workers_ahead,
                                     node_on_loopback, temp_dir_option, worker_lines_to_the_log, workers_inherit_env)
from workloads.threads import thread_env


class ClusterError(RuntimeError):
    """The Ray cluster cannot be reached, or cannot run the sweep's trials."""


def resolve_address(address: str, timeout: float = 5.0) -> str:
    """The host:port of the cluster `address` names (`auto` reads RAY_ADDRESS or
    the last `ray start`), checked to answer within `timeout` seconds: Ray itself
    retries an unreachable address forever."""
    from orchestrator.unpromised import bootstrap_address

    if address == "auto":
        source = "RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else "Ray's record of the last `ray start` (ray_current_cluster)"
    else:
        source = "--address"
    target = address.split("://", 1)[-1]  # ray://host:port: the client server's port
    try:
        resolved = target if "://" in address else bootstrap_address(target)
    except (ConnectionError, ValueError) as e:
        raise ClusterError(f"--address {address}: {e}") from None
    host, _, port = resolved.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        shown = address if address == resolved else f"{address} ({resolved})"
        raise ClusterError(f"nothing answers at {shown}, from {source}, within {timeout:g} s: {e}. Start the "
                           "cluster (`ray start --head`, `ray up cluster.yaml`), or drop --address to run on a local Ray") from None
    return address if "://" in address else resolved


def port_taken(host: str, port: int) -> bool:
    return _free_port(host, port) != port


def _free_port(host: str, port: int) -> int:
    """`port` if it can be bound on `host`, else a free one."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return port
        except OSError:
            pass
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_ray(spec: SweepSpec, address: Optional[str], temp_dir: Optional[str], dashboard_host: str,
              dashboard_port: int, num_cpus: Optional[int], dashboard: bool = True,
              say: Callable[[str], None] = lambda line: None):
    """Attaches to a cluster at `address`, or starts an embedded local Ray, with its
    dashboard unless `dashboard` is false (never a stale cluster found in RAY_ADDRESS
    or Ray's records). Returns Ray's context and notes for the user; `say` tells of a
    wait meanwhile."""
    # Tune gives a trial its CPUs through a placement group and runs the trial in a
    # thread of its own, so neither Ray nor torch.set_num_threads there bounds the
    # OpenMP and numba pools: without this, a 1-CPU trial ran 3.6x slower, its
    # extra threads spinning against the other trials.
    runtime_env = {"env_vars": thread_env(max(1, int(spec.resources.cpus_per_trial)))}
    # The dashboard's Jobs page names a job by its metadata's job_name: the sweep's.
    job_config = ray.job_config.JobConfig(metadata={"job_name": spec.name})
    workers_inherit_env(not address)  # the embedded Ray's workers get the driver's environment: no secret is copied
    if address:
        ctx = ray.init(address=resolve_address(address), runtime_env=runtime_env, job_config=job_config,
                       log_to_driver=True)
        worker_lines_to_the_log()
        from orchestrator.mps import wanted

        return ctx, [why for why in [wanted(spec.resources.mps, embedded=False, shares_a_gpu=False)[1]] if why]
    notes = []
    # Ray binds the dashboard's port only when the dashboard is up, seconds after
    # the port was found free: two launches a second apart both chose 8265 and the
    # second failed after a minute. One launch at a time on this machine chooses
    # its port and starts Ray (ray.init returns once the dashboard listens).
    # The embedded Ray's daemons in a process group of their own: a stop sent to the
    # driver's group (`kill -TERM -PGID`, as systemd, a batch scheduler or `docker
    # stop` send it) then reaches the driver alone, which stops the sweep as on
    # Ctrl-C; in the driver's group the daemons died with it and the driver stalled
    # on the lost GCS. Ray still ends them with the driver (ray.shutdown, or the
    # kernel's parent-death signal it sets on Linux).
    base = _private_base(temp_dir)
    ray_temp = str(base / "ray")
    with one_start_at_a_time(_checked(start_lock_folder, temp_dir), say), daemons_in_a_group_of_their_own():
        ended, left = end_orphans(ray_temp)
        if ended:
            notes.append(f"Ended {ended} Ray process(es) a killed icr-sweep left running (their driver is gone).")
        notes += left + _mps_for_the_trials(spec, base)
        port = _free_port(dashboard_host, dashboard_port) if dashboard else dashboard_port
        if port != dashboard_port:
            notes.append(f"Port {dashboard_port} is taken; the dashboard listens on {port} instead (--dashboard-port to choose).")
        session = Session(base)  # before Ray starts: a driver killed during the start is known
        # Ray's processes listen on the machine's routable address (its GCS, raylet and
        # workers on every interface, its metrics endpoints without a token): on
        # loopback alone unless the dashboard is asked onto the network.
        try:
            with node_on_loopback(not dashboard or is_loopback(dashboard_host)), no_idle_workers_ahead():
                ctx = ray.init(
                    address="local", include_dashboard=dashboard, dashboard_host=dashboard_host, dashboard_port=port,
                    num_cpus=num_cpus, **temp_dir_option(ray_temp), runtime_env=runtime_env,
                    job_config=job_config, log_to_driver=True,
                )
        except Exception as e:
            # Free when chosen: another user's Ray, another launch (whose start lock is
            # another's), or another program took it; by the time Ray says so, that
            # one may be between its own tries, so its dashboard's log decides too.
            if dashboard and (port_taken(dashboard_host, port) or _port_clash(str(e), ray_temp)):
                raise ClusterError(f"Ray's dashboard did not start: port {port} on {dashboard_host}, free when this "
                                   f"launch chose it, was taken meanwhile by another program (another launch's "
                                   "Ray, say). Launch again, or choose a free port with --dashboard-port") from e
            raise
        session.started_ray(ctx.address_info.get("session_dir"))
    worker_lines_to_the_log()
    return ctx, notes


def _mps_for_the_trials(spec: SweepSpec, base: Path) -> list[str]:
    """Ends the MPS daemons killed drivers left, then starts this launch's where
    resources.mps asks (orchestrator/mps.py), before Ray: its workers inherit the
    pipe's folder. Notes for the user."""
    from orchestrator import mps

    ended, notes = mps.end_orphan_daemons(base)
    if ended:
        notes.append(f"Ended {ended} MPS daemon(s) a killed icr-sweep left running.")
    gpus = tuple(nvidia_smi("name")) if spec.resources.mps == "auto" and spec.resources.device != "cpu" else ()
    start, why_not = mps.wanted(spec.resources.mps, embedded=True, shares_a_gpu=bool(gpus) and _trials_share_a_gpu(spec),
                                gpus=gpus)
    if start:
        try:
            daemon = mps.start_for_this_driver(base)
            notes.append(f"Trials sharing a GPU run under MPS, side by side (its daemon's log: {daemon.log}).")
        except mps.MPSError as e:
            notes.append(f"The MPS daemon did not start ({e}): trials sharing a GPU take turns on it, time-sliced.")
    return notes + ([why_not] if why_not else [])


def _trials_share_a_gpu(spec: SweepSpec) -> bool:
    """Whether trials of `spec` would share a GPU: some ask for less than a whole one."""
    return min((share for share, _ in gpu_shares(spec).values()), default=1.0) < 1.0


def _port_clash(error: str, ray_temp: str) -> bool:
    """Whether the dashboard's log that Ray's start `error` names (else the latest
    session's under `ray_temp`) says its port was in use."""
    import re

    named = re.search(r"(\S+dashboard\.log)", error)
    log = Path(named.group(1)) if named else Path(ray_temp, "session_latest", "logs", "dashboard.log")
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - (1 << 16)))
            return b"address already in use" in f.read()
    except OSError:
        return False


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or address) is this machine's loopback alone."""
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError, UnicodeError):
        return False


def ray_token_auth() -> bool:
    """Whether a Ray started here asks for its token: Ray 2.60 turns token
    authentication on for a local Ray unless RAY_AUTH_MODE says otherwise."""
    return os.environ.get("RAY_AUTH_MODE", "token").lower() == "token"


def ray_temp_dir(temp_dir: Optional[str]) -> str:
    """Where the embedded Ray keeps its files (logs, sockets): `ray` inside a folder
    this user alone may enter, `temp_dir` or <tmp>/icr-sweep-<uid> (made 0700). Ray
    makes its own temp dir and each session 0777 and its logs 0644, again as each
    worker starts, so every local user read them (a runtime env's values
    included); it leaves the folder above alone."""
    return str(_private_base(temp_dir) / "ray")


def _private_base(temp_dir: Optional[str]) -> Path:
    return _checked(private_base, temp_dir)


def _checked(folder: Callable[[Optional[str]], Path], temp_dir: Optional[str]) -> Path:
    try:
        return folder(temp_dir)
    except PrivateFolderError as e:
        raise ClusterError(str(e)) from None


def _node_type_gpus(config: dict) -> dict[str, float]:
    """GPUs per node of each worker type an autoscaler config may start."""
    types = config.get("available_node_types") or {}
    head = config.get("head_node_type")
    return {name: float((t.get("resources") or {}).get("GPU", 0)) for name, t in types.items()
            if name != head and isinstance(t, dict) and t.get("max_workers", config.get("max_workers", 0)) > 0}


def addable_gpus() -> tuple[float, str]:
    """GPUs per node that the cluster's autoscaler can add, and where that was read
    (0 and "" when it cannot, or says nothing). Autoscaler v2 reports its node types
    to the GCS; v1 (`ray up`) is asked through its config, which `ray up` puts on the
    head as ~/ray_bootstrap_config.yaml (ICR_CLUSTER_CONFIG names another file)."""
    groups = autoscaler_node_groups()  # none from an older GCS: the file then
    if max(groups.values(), default=0) > 0:
        return max(groups.values()), "the autoscaler's node types"
    path = Path(os.environ.get("ICR_CLUSTER_CONFIG", "~/ray_bootstrap_config.yaml")).expanduser()
    try:
        import yaml

        types = _node_type_gpus(yaml.safe_load(path.read_text()) or {})
    except (OSError, ValueError, AttributeError, TypeError):
        return 0.0, ""
    if max(types.values(), default=0) > 0:
        name = max(types, key=types.get)
        return types[name], f"node type {name} in {path}"
    return 0.0, ""


def trial_resources(spec: SweepSpec, attached: bool) -> tuple[dict, str]:
    """Ray resources per trial, and a note on how trials will run. With device auto,
    trials ask for GPUs when the cluster has some, or (attached) its autoscaler can
    add GPU nodes. Refuses (ClusterError) trials that no node of an embedded Ray can
    hold; on an attached cluster an autoscaler may add nodes, so that is a note."""
    res = spec.resources
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    most = {kind: max((n.get(kind, 0) for n in nodes), default=0) for kind in ("CPU", "GPU")}
    addable, source = addable_gpus() if attached and most["GPU"] == 0 else (0.0, "")
    if res.device == "cpu" or (res.device == "auto" and most["GPU"] == 0 and addable == 0):
        resources = {"cpu": res.cpus_per_trial, "gpu": 0}
        note = f"no GPU in the cluster: trials run on CPU ({res.cpus_per_trial:g} CPU each)" if res.device == "auto" else "device: cpu"
    else:
        resources = {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial}
        if res.gpus_per_trial == "auto":
            shares = sorted({share for share, _ in gpu_shares(spec).values()})
            note = (f"{', '.join(f'{s:g}' for s in shares)} GPU per trial by estimated peak memory "
                    f"(gpus_per_trial: auto; `icr-sweep plan` lists each) and {res.cpus_per_trial:g} CPU")
        else:
            note = f"{res.gpus_per_trial:g} GPU and {res.cpus_per_trial:g} CPU per trial"
        if addable:
            note += f" (no GPU node is up yet; the autoscaler can add nodes of {addable:g} GPU: {source})"
    asked = {**resources, "gpu": max(shares) if resources["gpu"] == "auto" else resources["gpu"]}
    short = [f"resources.{field} is {asked[key]:g}, but the largest node has {most[kind]:g} {kind}"
             for field, key, kind in (("cpus_per_trial", "cpu", "CPU"), ("gpus_per_trial", "gpu", "GPU"))
             if asked[key] > most[kind]]
    if short and not attached:
        hint = " (device: cuda asks for a GPU; use device: auto or cpu here)" if asked["gpu"] > most["GPU"] else ""
        raise ClusterError("no trial could ever start: " + "; ".join(short) + hint)
    if short:
        note += ". Waiting for an autoscaler to add nodes: " + "; ".join(short)
    return resources, note
