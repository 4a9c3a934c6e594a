"""The layers of DESIGN.md hold: each package imports only the layers it may (imports inside
functions included), and only contract/ and nodes/ import rclpy or ROS message packages."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "r2s2r"
# YAML validation, the share directory, polling, process start-up, how long commands end: used by every layer
SHARED = {"config", "paths", "plugins", "processes", "resumable", "waiting"}
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
    "real2sim": ABOVE_DATA | {"skills", "data", "train"},
    "skills": ABOVE_DATA | {"real2sim", "data", "train"},
    "data": ABOVE_DATA | {"real2sim", "skills", "train"},
    "train": ABOVE_DATA | {"real2sim", "skills", "data"},
    "loop": ABOVE_DATA | {"real2sim", "skills", "data", "train"},
    "nodes": ABOVE_DATA | {"real2sim", "skills", "data", "train", "loop"},
}
ROS = ("rclpy", "rosidl", "rosgraph_msgs", "sensor_msgs", "std_msgs", "std_srvs", "trajectory_msgs", "geometry_msgs",
       "control_msgs", "tf2_msgs", "action_msgs",
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


def test_every_plugin_is_registered_and_loads_what_its_kind_expects():
    """Backends, robots, tasks and scripted policies are r2s2r.plugins entry points: every
    Hardware subclass of hardware/ is a backend named as its module and its `backend`, a helper
    module (kernels, the controller) is never offered, and an unknown name lists the known ones."""
    from r2s2r import plugins
    from r2s2r.eval.tasks import task_names
    from r2s2r.hardware.backends import backend_names, load_backend
    from r2s2r.hardware.base import Hardware, HardwareError
    from r2s2r.robots import RobotSpec, registry
    assert backend_names() == ["aloha", "flexiv", "franka", "proxy", "rby1", "sim", "xarm"]
    for name in backend_names():
        hardware = load_backend(name)
        assert issubclass(hardware, Hardware) and hardware.backend == name
        # The proxy-real cell is built from real2sim's pieces (the twin's parameters), so it lives there.
        assert hardware.__module__ == ("r2s2r.real2sim.proxy_cell" if name == "proxy" else f"r2s2r.hardware.{name}")
    with pytest.raises(HardwareError, match="unknown backend 'kernels'; expected one of aloha, flexiv, franka, proxy, "
                                            "rby1, sim, xarm"):
        load_backend("kernels")
    # every module under hardware/ with a Hardware subclass of its own is registered
    defining = set()
    for path in (SRC / "hardware").glob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.ClassDef) and any(ast.unparse(b) == "Hardware" for b in n.bases) for n in tree.body):
            defining.add(path.stem)
    assert defining == set(backend_names()) - {"proxy"}
    assert all(isinstance(spec, RobotSpec) and spec.name == name for name, spec in registry().items())
    assert {"franka_fr3", "flexiv_rizon4", "flexiv_rizon4_pre2024"} <= set(registry())
    assert task_names() == ["aloha_cube_handover", "franka_block_in_bowl", "franka_cup_in_microwave"]
    assert set(task_names()) <= set(plugins.names("scripted_policies"))  # every task has its expert
    with pytest.raises(plugins.PluginError, match="unknown robot 'ur5'; expected one of aloha, "):
        plugins.load("robots", "ur5")


def test_only_a_backend_writes_its_lifecycle_state_and_no_one_swaps_a_twin_into_hardware():
    """The driver core makes every transition through the backend's hooks: nothing outside a
    Hardware writes `.state`, and a twin enters SimHardware through SimHardware.from_twin."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            flat = [t for each in targets for t in (each.elts if isinstance(each, ast.Tuple) else [each])]
            for target in flat:
                if isinstance(target, ast.Attribute) and target.attr in ("state", "twin") and not (
                        isinstance(target.value, ast.Name) and target.value.id == "self"):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(target)}")
    assert found == []
    from r2s2r.hardware.base import Hardware
    writers = {p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if "self.state = Lifecycle" in p.read_text()}
    assert writers == {f"hardware/{name}.py" for name in ("base", "sim", "franka", "xarm", "flexiv", "rby1", "aloha")}
    assert all(hasattr(Hardware, hook) for hook in ("on_configure", "on_activate", "on_deactivate", "on_error",
                                                    "on_cleanup"))
