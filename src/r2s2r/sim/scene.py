"""Scene description: the robot, a table, objects, cameras and lights, read from YAML.

Sizes are full extents in metres (a box's size is its width, depth and height), poses are
in the world frame (z up, the table top at z = table.height), angles in radians.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from r2s2r import paths
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.robots import CameraSpec, UnknownRobotError, get_robot

SHAPES = ("box", "cylinder", "sphere", "capsule")
_SIZE_LENGTHS = {"box": 3, "cylinder": 2, "sphere": 1, "capsule": 2}


@dataclass(frozen=True)
class ObjectSpec:
    name: str
    shape: str  # box: [x, y, z]; cylinder / capsule: [radius, height]; sphere: [radius]
    size: tuple[float, ...]
    mass: float = 0.1
    friction: float = 1.0
    rgba: tuple[float, float, float, float] = (0.8, 0.2, 0.2, 1.0)
    pos: tuple[float, float, float] = (0.5, 0.0, 0.1)
    quat: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0)  # wxyz
    fixed: bool = False  # welded to the world (a shelf, a fixture)

    @property
    def half_height(self) -> float:
        if self.shape == "box":
            return self.size[2] / 2
        if self.shape == "sphere":
            return self.size[0]
        return self.size[1] / 2 + (self.size[0] if self.shape == "capsule" else 0.0)


@dataclass(frozen=True)
class TableSpec:
    size: tuple[float, float, float] = (0.9, 1.2, 0.04)  # full extents; top face at `height`
    center: tuple[float, float] = (0.45, 0.0)
    height: float = 0.0
    friction: float = 1.0
    rgba: tuple[float, float, float, float] = (0.55, 0.42, 0.3, 1.0)


@dataclass(frozen=True)
class LightSpec:
    name: str
    pos: tuple[float, float, float] = (0.4, 0.0, 2.0)
    dir: tuple[float, float, float] = (0.0, 0.0, -1.0)
    diffuse: tuple[float, float, float] = (0.7, 0.7, 0.7)
    castshadow: bool = True


@dataclass(frozen=True)
class Scene:
    robot: str
    timestep: float = 0.001
    table: TableSpec | None = field(default_factory=TableSpec)
    objects: tuple[ObjectSpec, ...] = ()
    cameras: tuple[CameraSpec, ...] = ()  # in addition to the robot's own cameras
    lights: tuple[LightSpec, ...] = (LightSpec("key"),)
    robot_cameras: bool = True
    shadows: bool = False  # shadows cost about two thirds of a CPU frame
    seed: int = 0
    source: str = "<scene>"

    def with_objects(self, objects) -> "Scene":
        return replace(self, objects=tuple(objects))

    def all_cameras(self) -> tuple[CameraSpec, ...]:
        own = get_robot(self.robot).cameras if self.robot_cameras else ()
        return tuple(own) + tuple(self.cameras)


def _camera(sec: Section, default_name: str | None = None) -> CameraSpec:
    sec.reject_unknown({"name", "width", "height", "fovy", "pos", "lookat", "quat", "parent"})
    lookat = sec.vector("lookat", 3, default=None) if sec.has("lookat") else None
    quat = sec.vector("quat", 4, default=None) if sec.has("quat") else None
    if lookat is None and quat is None:
        raise sec.error("lookat", "a point to look at ([x, y, z]) or a quat ([w, x, y, z])")
    return CameraSpec(name=sec.string("name", default_name or ...),
                      width=sec.integer("width", 320, minimum=16), height=sec.integer("height", 240, minimum=16),
                      fovy=sec.number("fovy", 60.0, minimum=1.0, maximum=179.0), pos=sec.vector("pos", 3),
                      lookat=lookat, quat=quat, parent=sec.string("parent", None) if sec.has("parent") else None)


def _object(sec: Section) -> ObjectSpec:
    sec.reject_unknown({"name", "shape", "size", "mass", "friction", "rgba", "pos", "yaw", "quat", "fixed"})
    shape = sec.string("shape", choices=SHAPES)
    size = sec.vector("size", _SIZE_LENGTHS[shape], positive=True)
    if sec.has("yaw") and sec.has("quat"):
        raise sec.error("yaw", "either yaw or quat, not both")
    if sec.has("quat"):
        quat = sec.vector("quat", 4)
    else:
        import math
        yaw = sec.number("yaw", 0.0)
        quat = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
    return ObjectSpec(name=sec.string("name"), shape=shape, size=size,
                      mass=sec.number("mass", 0.1, positive=True), friction=sec.number("friction", 1.0, positive=True),
                      rgba=sec.vector("rgba", 4, default=(0.8, 0.2, 0.2, 1.0)), pos=sec.vector("pos", 3),
                      quat=quat, fixed=sec.boolean("fixed", False))


def parse_scene(data: dict, source: str = "<scene>") -> Scene:
    top = Section(data, source)
    top.reject_unknown({"robot", "timestep", "table", "objects", "cameras", "lights", "robot_cameras",
                        "shadows", "seed"})
    robot = top.string("robot")
    try:
        get_robot(robot)
    except UnknownRobotError as exc:
        raise top.error("robot", "a registered robot: " + ", ".join(exc.known), robot) from None
    table = None
    if top.raw("table", {}) is not None:
        t = top.section("table", {})
        t.reject_unknown({"size", "center", "height", "friction", "rgba"})
        d = TableSpec()
        table = TableSpec(size=t.vector("size", 3, d.size, positive=True), center=t.vector("center", 2, d.center),
                          height=t.number("height", d.height), friction=t.number("friction", d.friction, positive=True),
                          rgba=t.vector("rgba", 4, d.rgba))
    objects = tuple(_object(s) for s in top.sections("objects"))
    cameras = tuple(_camera(s) for s in top.sections("cameras"))
    lights = []
    for s in top.sections("lights"):
        s.reject_unknown({"name", "pos", "dir", "diffuse", "castshadow"})
        d = LightSpec("light")
        lights.append(LightSpec(s.string("name"), s.vector("pos", 3, d.pos), s.vector("dir", 3, d.dir),
                                s.vector("diffuse", 3, d.diffuse), s.boolean("castshadow", d.castshadow)))
    names = [o.name for o in objects] + [c.name for c in cameras]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise top.error("objects", "unique object and camera names", duplicates)
    return Scene(robot=robot, timestep=top.number("timestep", 0.001, positive=True, maximum=0.01),
                 table=table, objects=objects, cameras=cameras,
                 lights=tuple(lights) if top.has("lights") else Scene.lights,
                 robot_cameras=top.boolean("robot_cameras", True), shadows=top.boolean("shadows", False),
                 seed=top.integer("seed", 0, minimum=0), source=source)


def load_scene(path: str | Path) -> Scene:
    """A Scene from a YAML file; errors name the file, the key and what was expected."""
    resolved = paths.resolve(path)
    return parse_scene(load_yaml(resolved), str(resolved))


def default_scene(robot: str) -> Scene:
    try:
        get_robot(robot)
    except UnknownRobotError:
        raise
    return Scene(robot=robot)


__all__ = ["Scene", "ObjectSpec", "TableSpec", "LightSpec", "ConfigError", "load_scene", "parse_scene",
           "default_scene", "SHAPES"]
