"""Scene description: the robot, a table, objects, fixtures (sim/fixtures.py), cameras and
lights, read from YAML.

Sizes are full extents in metres (a box's size is its width, depth and height), poses are
in the world frame (z up, the table top at z = table.height), angles in radians.

`dynamics: robot_dynamics.yaml` (relative to the scene's folder) names fitted robot dynamics
(sim.dynamics: per-joint gains, damping, armature, friction loss, command latency) that every
Twin of the scene applies; `r2s2r align --fit` writes such a pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from r2s2r import paths
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.robots import CameraSpec, UnknownRobotError, get_robot
from r2s2r.sim.dynamics import DynamicsSpec, load_dynamics
from r2s2r.sim.fixtures import FixtureSpec, parse_fixture

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

    @property
    def extents(self) -> tuple[float, float, float]:
        """Its bounding box's full extents along its own x, y and z axes (m): what a camera
        measures of it."""
        if self.shape == "box":
            return tuple(float(s) for s in self.size[:3])
        radius = float(self.size[0])
        if self.shape == "sphere":
            return (2 * radius,) * 3
        height = float(self.size[1]) + (2 * radius if self.shape == "capsule" else 0.0)
        return (2 * radius, 2 * radius, height)

    @property
    def footprint_radius(self) -> float:
        """The radius of the circle that bounds it seen from above, at any yaw."""
        return math.hypot(self.size[0], self.size[1]) / 2 if self.shape == "box" else self.size[0]


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
    fixtures: tuple[FixtureSpec, ...] = ()  # furniture welded to the world (sim/fixtures.py)
    cameras: tuple[CameraSpec, ...] = ()  # in addition to the robot's own cameras, or replacing one by name
    lights: tuple[LightSpec, ...] = (LightSpec("key"),)
    robot_cameras: bool = True
    shadows: bool = False  # shadows cost about two thirds of a CPU frame
    seed: int = 0
    source: str = "<scene>"
    dynamics: DynamicsSpec | None = None  # fitted robot dynamics (sim.dynamics), applied by every Twin

    def with_objects(self, objects) -> "Scene":
        return replace(self, objects=tuple(objects))

    def all_cameras(self) -> tuple[CameraSpec, ...]:
        own = get_robot(self.robot).cameras if self.robot_cameras else ()
        overridden = {c.name for c in self.cameras}
        return tuple(c for c in own if c.name not in overridden) + tuple(self.cameras)


def _camera(sec: Section, base: CameraSpec | None = None) -> CameraSpec:
    """A camera entry; with `base` (the camera it overrides) every field defaults to base's."""
    sec.reject_unknown({"name", "width", "height", "fovy", "pos", "lookat", "quat", "parent"})
    lookat = sec.vector("lookat", 3, default=None) if sec.has("lookat") else None
    quat = sec.vector("quat", 4, default=None) if sec.has("quat") else None
    if lookat is None and quat is None:
        if base is None:
            raise sec.error("lookat", "a point to look at ([x, y, z]) or a quat ([w, x, y, z])")
        lookat, quat = base.lookat, base.quat
    parent = base.parent if base is not None else None
    if sec.has("parent"):  # null: the world
        parent = sec.string("parent") if sec.raw("parent") is not None else None
    return CameraSpec(name=sec.string("name"),
                      width=sec.integer("width", base.width if base else 320, minimum=16),
                      height=sec.integer("height", base.height if base else 240, minimum=16),
                      fovy=sec.number("fovy", base.fovy if base else 60.0, minimum=1.0, maximum=179.0),
                      pos=sec.vector("pos", 3, base.pos if base else ...), lookat=lookat, quat=quat, parent=parent)


def _scene_file(source: str, path: str) -> Path:
    """A file named in a scene: relative to the scene's own folder, else as paths.resolve finds it."""
    beside = Path(source).parent / path
    return beside if not Path(path).is_absolute() and beside.is_file() else paths.resolve(path)


def _apply_camera_extrinsics(top: Section, cameras: list[CameraSpec], robot_cameras: dict[str, CameraSpec]) -> None:
    """Poses from a camera-extrinsics file (what `r2s2r calibrate handeye` writes) replace those of
    the scene's or the robot's cameras of the same name."""
    path = _scene_file(str(top.source), top.string("camera_extrinsics"))
    extrinsics = Section(load_yaml(path), str(path))
    extrinsics.reject_unknown({"cameras"})
    for sec in extrinsics.sections("cameras"):
        known = robot_cameras | {c.name: c for c in cameras}
        name = sec.string("name")
        if name not in known:
            raise sec.error("name", "a camera of the scene or the robot: " + ", ".join(sorted(known)), name)
        camera = _camera(sec, known[name])
        index = next((i for i, c in enumerate(cameras) if c.name == name), None)
        if index is None:
            cameras.append(camera)
        else:
            cameras[index] = camera


def parse_object(sec: Section) -> ObjectSpec:
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
    top.reject_unknown({"robot", "timestep", "table", "objects", "fixtures", "cameras", "camera_extrinsics", "lights",
                        "robot_cameras", "shadows", "seed", "dynamics"})
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
    objects = tuple(parse_object(s) for s in top.sections("objects"))
    fixtures = tuple(parse_fixture(s) for s in top.sections("fixtures"))
    # A scene camera named like one of the robot's overrides it (pose, resolution, field of view).
    robot_cameras = {c.name: c for c in get_robot(robot).cameras}
    cameras = [_camera(s, robot_cameras.get(s.raw("name", None))) for s in top.sections("cameras")]
    if top.has("camera_extrinsics"):
        _apply_camera_extrinsics(top, cameras, robot_cameras)
    cameras = tuple(cameras)
    lights = []
    for s in top.sections("lights"):
        s.reject_unknown({"name", "pos", "dir", "diffuse", "castshadow"})
        d = LightSpec("light")
        lights.append(LightSpec(s.string("name"), s.vector("pos", 3, d.pos), s.vector("dir", 3, d.dir),
                                s.vector("diffuse", 3, d.diffuse), s.boolean("castshadow", d.castshadow)))
    names = [o.name for o in objects] + [f.name for f in fixtures] + [c.name for c in cameras]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise top.error("objects", "unique object, fixture and camera names", duplicates)
    dynamics = None
    if top.raw("dynamics", None) is not None:
        where = top.string("dynamics")
        path = Path(source).parent / where if not Path(where).is_absolute() else Path(where)
        if not path.is_file():
            raise top.error("dynamics", "a robot dynamics file (relative to the scene's folder)", str(path))
        dynamics = load_dynamics(path, get_robot(robot))
    return Scene(robot=robot, timestep=top.number("timestep", 0.001, positive=True, maximum=0.01),
                 table=table, objects=objects, fixtures=fixtures, cameras=cameras,
                 lights=tuple(lights) if top.has("lights") else Scene.lights,
                 robot_cameras=top.boolean("robot_cameras", True), shadows=top.boolean("shadows", False),
                 seed=top.integer("seed", 0, minimum=0), source=source, dynamics=dynamics)


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
           "parse_object", "default_scene", "SHAPES"]
