"""`device: auto` on an autoscaling cluster, shown on CPU with Ray's fake multi-node
provider (the one behind ray.cluster_utils.AutoscalingCluster): a head without GPU
and a GPU worker type with min_workers 0. The sweep must ask for GPUs, the
autoscaler must add the worker, and each trial must hold its GPU share (here chosen by gpus_per_trial: auto)."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.rundir import load_trials
from tests.orchestrator.e2e import SWEEPS, free_port, kill_leftovers

pytestmark = pytest.mark.slow


def fake_cluster_config(port: int) -> dict:
    """An autoscaler config for Ray's fake_multinode provider (the shape of Ray's own
    fake_multi_node/example.yaml, which its wheels do not ship)."""
    import ray

    return dict(
        cluster_name="icr-fake", max_workers=1, upscaling_speed=1.0, idle_timeout_minutes=5,
        provider=dict(type="fake_multinode", use_node_id_as_ip=True, disable_node_updaters=True,
                      disable_launch_config_check=True,
                      gcs_address=f"{ray._private.services.get_node_ip_address()}:{port}"),
        auth={}, docker={}, head_node_type="head",
        available_node_types={
            "head": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "gpu_worker": {"resources": {"CPU": 2, "GPU": 1, "object_store_memory": 200_000_000},
                           "node_config": {}, "min_workers": 0, "max_workers": 1},
        },
        file_mounts={}, cluster_synced_files=[], file_mounts_sync_continuously=False, rsync_exclude=[],
        rsync_filter=[], initialization_commands=[], setup_commands=[], head_setup_commands=[],
        worker_setup_commands=[], head_start_ray_commands=[], worker_start_ray_commands=[],
    )


@pytest.fixture
def gpu_autoscaling_cluster():
    temp = tempfile.mkdtemp(prefix="icr-asc-", dir="/tmp")
    port = free_port()
    config = Path(temp, "autoscaling.yaml")
    config.write_text(yaml.safe_dump(fake_cluster_config(port)))
    # Ray 2.60 turns token authentication on for `ray start`: give the cluster and
    # its drivers one token.
    env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    env.pop("RAY_ADDRESS", None)
    ray_bin = str(Path(sys.executable).parent / "ray")
    subprocess.run([ray_bin, "start", "--head", f"--port={port}", f"--temp-dir={temp}", f"--autoscaling-config={config}",
                    "--num-cpus=0", "--include-dashboard=false", "--disable-usage-stats"], env=env, check=True,
                   capture_output=True, timeout=120)
    yield fake_cluster_config(port)["provider"]["gcs_address"], config, env
    kill_leftovers(temp)
    time.sleep(1)  # killed processes may still be closing their files there
    shutil.rmtree(temp, ignore_errors=True)


def test_auto_asks_for_gpus_that_the_autoscaler_can_add(tmp_path, gpu_autoscaling_cluster):
    address, config, env = gpu_autoscaling_cluster
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec["resources"].update(device="auto", cpus_per_trial=1, gpus_per_trial="auto")
    spec_path = tmp_path / "micro.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    storage = tmp_path / "runs"
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "launch", str(spec_path), "--storage", str(storage),
                             "--address", address], capture_output=True, text=True, timeout=600,
                            env={**env, "ICR_CLUSTER_CONFIG": str(config)})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    # Tiny trials: gpus_per_trial auto packs them 8 to a GPU.
    assert "0.125 GPU per trial by estimated peak memory" in out, out[-4000:]
    assert "autoscaler can add nodes of 1 GPU: node type gpu_worker" in out, out[-4000:]

    nodes = subprocess.run([sys.executable, "-c", "import json, ray; ray.init(address=%r, log_to_driver=False); "
                            "print(json.dumps([n['Resources'] for n in ray.nodes() if n['Alive']]))" % address],
                           capture_output=True, text=True, timeout=120, env=env)
    resources = json.loads(nodes.stdout.strip().splitlines()[-1])
    assert [r.get("GPU", 0) for r in resources if r.get("GPU")] == [1], f"the GPU worker was not added: {resources}"
    df = load_trials(storage / "istree_micro")
    assert len(df) == 2 and (df["state"] == "finished").all(), df[["trial", "state", "error"]]
    for trial_dir in (storage / "istree_micro").glob("*/result.json"):
        last = json.loads(trial_dir.read_text().splitlines()[-1])
        assert last["gpu_share"] == 0.125 and last["cuda_devices"] == "0", last  # Ray gave it the fake GPU 0
