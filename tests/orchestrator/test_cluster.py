"""cluster.yaml: Ray's own autoscaler validation, and the set-up the README relies on."""

from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER = Path(__file__).parents[2] / "cluster.yaml"


def test_cluster_config_passes_ray_autoscaler_validation():
    config = yaml.safe_load(CLUSTER.read_text())
    filled = prepare_config(config)  # merges Ray's AWS defaults, as `ray up` does before validating
    validate_config(filled)  # raises on a schema violation
    assert filled["provider"]["type"] == "aws"


def test_workers_are_a100_nodes_and_set_up_installs_the_cuda_extra():
    config = yaml.safe_load(CLUSTER.read_text())
    worker = config["available_node_types"]["a100"]
    assert worker["node_config"]["InstanceType"] == "p4d.24xlarge"
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"] == {"CPU": 0}  # trials never land on the CPU head
    setup = "\n".join(config["setup_commands"])
    assert "torch==" in setup and "[cuda]" in setup and "--no-build-isolation" in setup
    assert "--dashboard-host=127.0.0.1" in config["head_start_ray_commands"][-1]
