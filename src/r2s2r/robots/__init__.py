"""The robot registry.

Each module in this package that defines `SPEC` (a RobotSpec) registers a robot: adding an
arm is one module here, one URDF, one config YAML. Nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from r2s2r.robots.spec import CameraSpec, GripperSpec, JointGroup, JointLimits, RobotSpec

__all__ = ["RobotSpec", "JointGroup", "GripperSpec", "CameraSpec", "JointLimits",
           "UnknownRobotError", "get_robot", "robot_names", "registry"]

_NOT_ROBOTS = {"spec", "model"}


class UnknownRobotError(KeyError):
    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        super().__init__(f"unknown robot {name!r}; known robots: {', '.join(known)}")

    def __str__(self):
        return self.args[0]


@lru_cache(maxsize=1)
def registry() -> dict[str, RobotSpec]:
    robots = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_ROBOTS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        # A module names its robot SPEC, or several (variants of one arm) SPECS.
        for spec in getattr(module, "SPECS", None) or (getattr(module, "SPEC", None),):
            if isinstance(spec, RobotSpec):
                robots[spec.name] = spec
    return dict(sorted(robots.items()))


def robot_names() -> list[str]:
    return list(registry())


def get_robot(name: str) -> RobotSpec:
    robots = registry()
    if name not in robots:
        raise UnknownRobotError(name, list(robots))
    return robots[name]
