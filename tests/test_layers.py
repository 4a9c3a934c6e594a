"""The layers of DESIGN.md hold: each package imports only the layers it may (imports inside
functions included), and only contract/ and nodes/ import rclpy or ROS message packages."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "r2s2r"
# YAML validation, the share directory, polling, process start-up: used by every layer
SHARED = {"config", "paths", "processes", "waiting"}
# What each layer may import (DESIGN.md's table; `everything above` spelled out).
ABOVE_DATA = {"contract", "robots", "sim", "hardware", "camera", "policy", "eval", "search"}
MAY_IMPORT = {
    "contract": set(),
    "robots": {"contract"},
    "sim": {"robots", "contract"},
    "hardware": {"sim", "robots", "contract"},
    "camera": {"contract", "sim"},  # the table puts the sim-render frame source in camera/
    "policy": {"contract"},
    "eval": {"sim", "hardware", "policy", "camera", "robots", "contract", "search"},
    "search": {"sim", "hardware", "policy", "camera", "robots", "contract", "eval"},
    "real2sim": ABOVE_DATA | {"skills", "data"},
    "skills": ABOVE_DATA | {"real2sim", "data"},
    "data": ABOVE_DATA | {"real2sim", "skills"},
    "nodes": ABOVE_DATA | {"real2sim", "skills", "data"},
}
ROS = ("rclpy", "rosidl", "rosgraph_msgs", "sensor_msgs", "std_msgs", "std_srvs", "trajectory_msgs", "geometry_msgs",
       "diagnostic_msgs", "builtin_interfaces", "rcl_interfaces", "launch", "launch_ros")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def _modules():
    # A package's cli.py is the command's front end for that package (registered by r2s2r.cli):
    # the cli layer's, kept beside what it drives.
    return sorted(p for p in SRC.rglob("*.py") if p.parent != SRC and p.name != "cli.py")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_each_module_imports_only_the_layers_it_may(path):
    layer = path.relative_to(SRC).parts[0]
    allowed = MAY_IMPORT[layer] | {layer} | SHARED
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "r2s2r" and len(parts) > 1:
            assert parts[1] in allowed, f"{path.relative_to(SRC)} ({layer}) imports {name}"
        if layer not in ("contract", "nodes"):
            assert parts[0] not in ROS, f"{path.relative_to(SRC)} imports {name}: only contract/ and nodes/ may"


def test_the_backends_are_the_modules_that_define_hardware():
    """`backend:=` offers exactly the vendor backends and the twin; a helper module (the compiled
    kernels, the controller) is never offered, and naming one says which backends exist."""
    from r2s2r.hardware.backends import backend_names, load_backend
    from r2s2r.hardware.base import Hardware, HardwareError
    assert backend_names() == ["aloha", "flexiv", "franka", "rby1", "sim", "xarm"]
    assert all(issubclass(load_backend(name), Hardware) for name in backend_names())
    with pytest.raises(HardwareError, match="unknown backend 'kernels'; expected one of aloha, flexiv, franka, rby1, "
                                            "sim, xarm"):
        load_backend("kernels")
