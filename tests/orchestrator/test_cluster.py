"""cluster.yaml: Ray's own autoscaler validation, and the set-up that makes the
AWS cluster come up: a pinned image, loud set-up commands, boto3 on the head,
the workers' instance profile, one version of everything, token authentication."""

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from orchestrator.cluster import _node_type_gpus

ROOT = Path(__file__).parents[2]
CLUSTER = ROOT / "cluster.yaml"
COMMAND_LISTS = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                 "head_start_ray_commands", "worker_start_ray_commands")


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(CLUSTER.read_text())


def commands(config: dict) -> list[tuple[str, str]]:
    return [(key, cmd) for key in COMMAND_LISTS for cmd in config.get(key) or []]


def problems(command: str) -> list[str]:
    """What keeps a set-up command from failing loudly, or from doing what it says."""
    found = []
    if any(word.startswith("~") for word in _quoted_words(command)):
        found.append("a quoted tilde is not expanded (write $HOME, or leave ~ unquoted)")
    if re.search(r"\|\|\s*(echo|true|:|exit\s+0)\b", command) or re.search(r";\s*(true|:)\s*$", command):
        found.append("a failure is swallowed (|| echo, || true, ; true)")
    if re.search(r"\bset\s+\+e\b", command):
        found.append("set +e hides failures")
    return found


def _quoted_words(command: str) -> list[str]:
    """The contents of quoted strings in a shell command."""
    return [m.group(2) for m in re.finditer(r"""(["'])(.*?)\1""", command)]


@pytest.mark.parametrize("bad, problem", [
    ('pip install -e "~/icr-sweep[cuda]"', "quoted tilde"),
    ("pip install -e '~/icr-sweep[cuda]'", "quoted tilde"),
    ('pip install mamba-ssm || echo "mamba-ssm did not build"', "swallowed"),
    ("pip install mamba-ssm || true", "swallowed"),
    ("pip install mamba-ssm; true", "swallowed"),
    ("set +e; pip install mamba-ssm", "set +e"),
])
def test_the_command_check_catches_what_broke_the_old_cluster(bad, problem):
    assert any(problem in p for p in problems(bad)), problems(bad)


@pytest.mark.parametrize("good", ['pip install -e "$HOME/icr-sweep[cuda]"', "pip install -e ~/icr-sweep",
                                  "ulimit -n 65536; ray start --head", "test -x $CUDA_HOME/bin/nvcc && make"])
def test_the_command_check_passes_plain_commands(good):
    assert problems(good) == []


def test_every_setup_command_fails_loudly(config):
    bad = {f"{key}: {cmd}": problems(cmd) for key, cmd in commands(config) if problems(cmd)}
    assert not bad, bad
    for _, cmd in commands(config):
        shlex.split(cmd)  # well-formed shell quoting


def test_cluster_config_passes_ray_autoscaler_validation(config):
    filled = prepare_config(config)  # merges Ray's AWS defaults, as `ray up` does before validating
    validate_config(filled)  # raises on a schema violation
    assert filled["provider"]["type"] == "aws"


def test_every_node_runs_the_pinned_image(config):
    images = {name: t["node_config"].get("ImageId") for name, t in config["available_node_types"].items()}
    assert len(set(images.values())) == 1 and None not in images.values(), images
    image = next(iter(images.values()))
    assert image.startswith("ami-") or image.startswith("resolve:ssm:/aws/service/deeplearning/ami/x86_64/")
    assert "ubuntu-24.04" in image and "Python 3.12" in CLUSTER.read_text()  # the setup checks for 3.12
    assert any("python3.12" in cmd for _, cmd in commands(config))


def test_versions_are_pinned_once_for_every_node(config):
    setup = "\n".join(config["setup_commands"])
    torch_pin = re.search(r"torch==[\d.]+", setup).group(0)
    setup_env = (ROOT / "scripts" / "setup-env").read_text()
    assert f'torch_spec="${{ICR_TORCH-{torch_pin}}}"' in setup_env  # the same torch as local runs
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.fullmatch(r"ray\[[a-z,]+\]==[\d.]+", d) for d in deps), deps  # the project pins Ray exactly
    assert "pip install -q -e ~/icr-sweep" in setup  # ... and every node installs that project


def test_the_head_can_autoscale_and_workers_can_write_to_s3(config):
    assert any("boto3" in cmd for cmd in config["head_setup_commands"])
    worker = config["available_node_types"]["a100"]
    assert worker["node_config"]["InstanceType"] == "p4d.24xlarge"
    assert worker["node_config"]["IamInstanceProfile"]  # Ray gives a profile to the head only
    assert "iam:PassRole" in (ROOT / "docs" / "cluster.md").read_text()  # the set-up steps say how the head passes it
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"] == {"CPU": 0}  # trials never land on the CPU head


def test_gpu_workers_prove_mamba_kernels_at_setup(config):
    worker_setup = "\n".join(config["worker_setup_commands"])
    assert '"$HOME/icr-sweep[cuda]"' in worker_setup and "--no-build-isolation" in worker_setup
    assert "from mamba_ssm.ops.selective_scan_interface import selective_scan_fn" in worker_setup
    assert "driver_version" in worker_setup and "580" in worker_setup


def test_auto_device_sees_the_gpus_the_cluster_can_add(config):
    assert _node_type_gpus(config) == {"a100": 8.0}


def test_token_auth_reaches_every_node_and_local_files_stay_home(config):
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert "RAY_AUTH_MODE=token" in config[key][-1]
    assert "--dashboard-host=127.0.0.1" in config["head_start_ray_commands"][-1]
    assert {".venv", "runs"} <= set(config["rsync_exclude"])


def test_the_embedded_rays_files_lie_in_a_folder_of_the_users_alone(tmp_path, monkeypatch):
    """Issue 52, class 1: Ray makes its temp dir 0777 and its logs 0644; its files now
    lie under a folder only the user may enter (made 0700), which Ray leaves alone."""
    import os

    from orchestrator.cluster import ClusterError, ray_temp_dir

    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    old = os.umask(0o022)
    try:
        assert ray_temp_dir(None) == str(tmp_path / f"icr-sweep-{os.getuid()}" / "ray")
        assert (tmp_path / f"icr-sweep-{os.getuid()}").stat().st_mode & 0o777 == 0o700
        given = tmp_path / "mine" / "tmp"
        assert ray_temp_dir(str(given)) == str(given / "ray") and given.stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old)
    if os.getuid() == 0:  # a default folder another user made first is refused
        theirs = tmp_path / "other"
        (theirs / "icr-sweep-0").mkdir(parents=True)
        os.chown(theirs / "icr-sweep-0", 1234, 1234)
        monkeypatch.setattr("tempfile.gettempdir", lambda: str(theirs))
        with pytest.raises(ClusterError, match="belongs to another user"):
            ray_temp_dir(None)
