"""Shared set-up for the benchmarks that run real processes over DDS."""

import os
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def isolate_ros_domain() -> str:
    """Keep a benchmark's traffic on this host and off any other run's domain."""
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 200))
    return os.environ["ROS_DOMAIN_ID"]


def driver_stack(robot: str, **parameters) -> Path:
    """A one-node stack file running driver_node for `robot` with its table scene, if it has one."""
    scene = REPO / "config" / "scenes" / f"{robot}_table.yaml"
    params = {"robot": robot, **({"scene": str(scene)} if scene.is_file() else {}), **parameters}
    stack = {"name": f"bench_{robot}", "nodes": [{"name": "driver", "executable": "driver_node",
                                                   "parameters": [params]}]}
    path = Path(tempfile.mkdtemp(prefix="r2s2r-bench-")) / "stack.yaml"
    path.write_text(yaml.safe_dump(stack))
    return path
