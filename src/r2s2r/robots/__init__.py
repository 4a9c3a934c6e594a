"""The robot registry: the `r2s2r.robots` plug-ins (r2s2r.plugins), each a RobotSpec.

Adding an arm is one module with its SPEC, one URDF, one config YAML and one entry point line
(`my_arm = "package.module:SPEC"`, in this package's pyproject.toml or a lab's own).
"""

from __future__ import annotations

from functools import lru_cache

from r2s2r import plugins
from r2s2r.robots.spec import CameraSpec, GripperSpec, JointGroup, JointLimits, RobotSpec

__all__ = ["RobotSpec", "JointGroup", "GripperSpec", "CameraSpec", "JointLimits",
           "UnknownRobotError", "get_robot", "robot_names", "registry", "canonical_name", "ALIASES"]

# Names that earlier releases used for a robot, still accepted wherever a robot is named.
ALIASES = {"franka": "franka_fr3"}


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
    for name in plugins.names("robots"):
        spec = plugins.load("robots", name)
        if not isinstance(spec, RobotSpec) or spec.name != name:
            raise plugins.PluginError(f"robot plug-in {name!r} ({plugins.source('robots', name)}) is "
                                      f"{getattr(spec, 'name', type(spec).__name__)!r}; expected the RobotSpec "
                                      f"named {name!r}")
        robots[name] = spec
    return robots


def robot_names() -> list[str]:
    return list(registry())


def canonical_name(name: str) -> str:
    """The registry name of `name`, which may be an alias."""
    return ALIASES.get(name, name)


def get_robot(name: str) -> RobotSpec:
    robots = registry()
    name = canonical_name(name)
    if name not in robots:
        raise UnknownRobotError(name, list(robots))
    return robots[name]
