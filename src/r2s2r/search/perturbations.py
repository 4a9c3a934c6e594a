"""Perturbation spaces: named factors a trial can vary, read from YAML, each mapped to [0, 1].

A space is a list of factors. A factor has a `kind` (what it changes), a `target` (which
object, fixture, camera, light or joint) and either a `range: [low, high]` (optionally
`log: true`) or `choices: [...]`. A point of the space is a dict of factor name -> value in
the factor's own units; a factor left out keeps its nominal value. `from_unit` / `to_unit`
map a point of the unit cube (one coordinate per factor, in the order of the file) to values
and back, which is what samplers and boundary search work in.

    factors:
      - {name: block_x, kind: object_x, target: block, range: [-0.1, 0.3]}
      - {name: block_friction, kind: object_friction, target: block, range: [0.02, 1.5], log: true}
      - {name: block_colour, kind: object_color, target: block, choices: [[0.85, 0.15, 0.12, 1], red, green]}

`envelopes:` names sub-boxes of the space, narrower ranges for some factors (the others keep
theirs), for searches that should stay within, say, the conditions a deployment expects:

    envelopes:
      operating: {block_x: [-0.15, 0.4], block_friction: [0.08, 1.5]}

Kinds, their units and the value that changes nothing (the nominal, unless `nominal:` says):

| kind | target | value | nominal |
|---|---|---|---|
| object_x, object_y | object | offset of its position, m | 0 |
| object_yaw | object | rotation about the vertical, rad | 0 |
| object_scale | object | scale of every extent; mass follows the volume; it stays on its support | 1 |
| object_mass_scale | object | density multiplier | 1 |
| object_friction | object | sliding friction coefficient (also against the fingers: see eval.tasks) | the scene's |
| object_color, table_color, fixture_color | object / - / fixture | index into `choices` (RGBA or names) | 0 * |
| fixture_x, fixture_y, fixture_yaw | fixture | offset, m / rad | 0 |
| door_angle | hinged_box fixture | initial door opening, rad | the scene's |
| table_friction | - | sliding friction coefficient of the table | the scene's |
| joint_offset | joint | offset of the initial joint position, rad | 0 |
| camera_x, camera_y, camera_z | camera | offset of its position (parent frame), m | 0 |
| camera_roll, camera_pitch, camera_yaw | camera | rotation about its optical axis / right / up axis, rad | 0 |
| light_intensity | light | diffuse scale | 1 |
| light_tilt | light | tilt of its direction away from the nominal, rad | 0 |
| light_azimuth | light | the direction of that tilt about the vertical, rad | 0 |
| distractors | - | how many of the factor's `objects:` are added (integer); one whose footprint would start on an object or fixture (moved there by the other factors) is left out | 0 |
| actuator_gain | - | scale of every arm actuator's stiffness and damping (the twin's own: fitted ones included) | 1 |
| command_latency | - | delay of every command, s | 0 |
| variant | - | which scene of the factor's `pool:` the trial starts from: 0 is the task's own scene, k the pool's variant k (integer) | 0 |

* `nominal:` may pick another index; the nominal choice must be the scene's own colour.

A `variant` factor draws the trial's base scene from a pool of validated real-to-sim variants
(`r2s2r variants`, real2sim.variants: one factor of the task's scene changed at a time and
carried through to what depends on it, each re-validated):

      - {name: scene_variant, kind: variant, pool: ../variants/franka_block_in_bowl/pool.yaml}

`pool:` is relative to the perturbation file. Value k > 0 replaces the task's scene by the
pool's variant k (`index: k` in pool.yaml) before the other factors apply, so they act on the
variant (a block_x offset moves the variant's block, a factor at its nominal value leaves the
variant's own value: a material variant keeps its friction unless block_friction is set to
another one); value 0, the nominal, is "no variant", the task's scene itself, so a trial that
leaves the factor out is the trial it was before the factor existed. It is a discrete factor
(pool size + 1 levels) like the counts and choices. Loading checks the pool: it must be of
this scene (its `base:` scene equal to the task's, its variants of the same robot, each with
every object, fixture, camera and light the task's scene has, none named like one of the
space's distractors); a missing or foreign pool is an error naming the file and what was
expected. Only one variant factor per space.

Scene factors are applied by `apply(scene, values)`; run-time ones (joint offsets, gains,
latency) come out of `runtime(values)` and are applied by `apply_runtime(twin, settings)`: the
latency by the twin itself (`Twin.set_command_latency`), which delays every arm and gripper
setpoint on its way to the actuators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import mujoco
import numpy as np

from r2s2r import paths
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.robots import CameraSpec, get_robot
from r2s2r.robots.model import look_at_quat
from r2s2r.sim.scene import ObjectSpec, Scene, load_scene, parse_object

COLOURS = {
    "red": (0.85, 0.15, 0.12, 1.0), "green": (0.2, 0.7, 0.25, 1.0), "blue": (0.15, 0.3, 0.85, 1.0),
    "yellow": (0.95, 0.85, 0.15, 1.0), "orange": (0.95, 0.5, 0.1, 1.0), "purple": (0.55, 0.25, 0.7, 1.0),
    "white": (0.92, 0.92, 0.92, 1.0), "grey": (0.5, 0.5, 0.5, 1.0), "black": (0.08, 0.08, 0.08, 1.0),
    "brown": (0.55, 0.42, 0.3, 1.0), "wood": (0.55, 0.42, 0.3, 1.0), "dark_wood": (0.33, 0.22, 0.14, 1.0),
}

# kind -> (what its target names, how its value acts: an offset, a scale, a value, a choice, a count)
_OFFSET, _SCALE, _ABSOLUTE, _CHOICE, _COUNT, _VARIANT = "offset", "scale", "absolute", "choice", "count", "variant"
NO_VARIANT = 0.0  # a variant factor's nominal: the task's own scene
KINDS: dict[str, tuple[str | None, str]] = {
    "object_x": ("object", _OFFSET), "object_y": ("object", _OFFSET), "object_yaw": ("object", _OFFSET),
    "object_scale": ("object", _SCALE), "object_mass_scale": ("object", _SCALE),
    "object_friction": ("object", _ABSOLUTE), "object_color": ("object", _CHOICE),
    "fixture_x": ("fixture", _OFFSET), "fixture_y": ("fixture", _OFFSET), "fixture_yaw": ("fixture", _OFFSET),
    "fixture_color": ("fixture", _CHOICE), "door_angle": ("door", _ABSOLUTE),
    "table_color": (None, _CHOICE), "table_friction": (None, _ABSOLUTE),
    "joint_offset": ("joint", _OFFSET),
    "camera_x": ("camera", _OFFSET), "camera_y": ("camera", _OFFSET), "camera_z": ("camera", _OFFSET),
    "camera_roll": ("camera", _OFFSET), "camera_pitch": ("camera", _OFFSET), "camera_yaw": ("camera", _OFFSET),
    "light_intensity": ("light", _SCALE), "light_tilt": ("light", _OFFSET), "light_azimuth": ("light", _OFFSET),
    "distractors": (None, _COUNT), "actuator_gain": (None, _SCALE), "command_latency": (None, _OFFSET),
    "variant": (None, _VARIANT),
}
RUNTIME_KINDS = ("joint_offset", "actuator_gain", "command_latency")


@dataclass(frozen=True)
class PoolVariant:
    """One scene of a variant pool (pool.yaml): what `r2s2r variants` changed, and the scene."""

    index: int  # the variant factor's value that picks it (1, 2, ...)
    factor: str  # real2sim.variants factor: geometry, pose_x, support_height, material, ...
    target: str | None
    value: float
    scene: Scene

    @property
    def label(self) -> str:
        return f"{self.factor}{' of ' + self.target if self.target else ''} {self.value:g}"


@dataclass(frozen=True)
class Factor:
    name: str
    kind: str
    target: str | None
    low: float
    high: float
    nominal: float
    log: bool = False
    choices: tuple[tuple[float, ...], ...] = ()  # choice factors: the values an index picks
    objects: tuple[ObjectSpec, ...] = ()  # distractors: the objects a count adds, in order
    pool: tuple[PoolVariant, ...] = ()  # variant: the scenes values 1, 2, ... pick

    @property
    def discrete(self) -> bool:
        return bool(self.choices) or self.kind in ("distractors", "variant")

    @property
    def levels(self) -> int:
        """How many values a discrete factor takes."""
        return len(self.choices) if self.choices else int(self.high - self.low) + 1

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        if self.discrete:
            return self.low + min(int(u * self.levels), self.levels - 1)
        if self.log:
            return float(self.low * (self.high / self.low) ** u)
        return float(self.low + u * (self.high - self.low))

    def to_unit(self, value: float) -> float:
        if self.discrete:
            return (value - self.low + 0.5) / self.levels
        if self.high == self.low:
            return 0.5
        if self.log:
            return math.log(value / self.low) / math.log(self.high / self.low)
        return (value - self.low) / (self.high - self.low)

    def check(self, value: Any, source: str) -> float:
        expected = (f"an integer from {self.low:g} to {self.high:g}" if self.discrete
                    else f"a number from {self.low:g} to {self.high:g}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(value):
            raise ConfigError(source, self.name, expected, value)
        value = float(value)
        if not self.low - 1e-12 <= value <= self.high + 1e-12 or (self.discrete and value != round(value)):
            raise ConfigError(source, self.name, expected, value)
        return value


def _colour(sec: Section, key: str, value: Any) -> tuple[float, ...]:
    if isinstance(value, str):
        if value not in COLOURS:
            raise sec.error(key, "a colour name (" + ", ".join(sorted(COLOURS)) + ") or [r, g, b, a]", value)
        return COLOURS[value]
    ok = isinstance(value, (list, tuple)) and len(value) in (3, 4) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in value)
    if not ok:
        raise sec.error(key, "a colour name or [r, g, b] / [r, g, b, a] with entries in [0, 1]", value)
    return tuple(float(v) for v in value) + ((1.0,) if len(value) == 3 else ())


class PerturbationSpace:
    """Named factors over a scene; see the module docstring for the YAML and the kinds."""

    def __init__(self, factors: tuple[Factor, ...], scene: Scene, source: str = "<perturbations>",
                 envelopes: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
                 skipped: Mapping[str, str] | None = None):
        self.factors = factors
        self.scene = scene
        self.source = source
        self.envelopes = dict(envelopes or {})
        self.skipped = dict(skipped or {})  # factors left out because they do not apply to the scene: why
        self._by_name = {f.name: f for f in factors}

    def within(self, envelope: str) -> "PerturbationSpace":
        """The same factors with the ranges of a named envelope (a sub-box of this space, such as
        the conditions a deployment expects); values drawn there are values of this space too."""
        if envelope not in self.envelopes:
            raise KeyError(f"{self.source}: no envelope {envelope!r}; envelopes: "
                           f"{', '.join(self.envelopes) or 'none'}")
        ranges = self.envelopes[envelope]
        factors = tuple(replace(f, low=ranges[f.name][0], high=ranges[f.name][1]) if f.name in ranges else f
                        for f in self.factors)
        return PerturbationSpace(factors, self.scene, f"{self.source} (envelope {envelope})")

    # -- the space ------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.factors)

    @property
    def dim(self) -> int:
        return len(self.factors)

    def factor(self, name: str) -> Factor:
        if name not in self._by_name:
            raise KeyError(f"{self.source}: no factor {name!r}; factors: {', '.join(self.names) or 'none'}")
        return self._by_name[name]

    def nominal(self) -> dict[str, float]:
        return {f.name: f.nominal for f in self.factors}

    def from_unit(self, u) -> dict[str, float]:
        u = np.asarray(u, float).ravel()
        if u.shape != (self.dim,):
            raise ValueError(f"{self.source}: a point of the unit cube has {self.dim} coordinates "
                             f"({', '.join(self.names)}), got {u.size}")
        return {f.name: f.from_unit(x) for f, x in zip(self.factors, u)}

    def to_unit(self, values: Mapping[str, float]) -> np.ndarray:
        full = self.complete(values)
        return np.array([f.to_unit(full[f.name]) for f in self.factors])

    def complete(self, values: Mapping[str, float] | None) -> dict[str, float]:
        """Every factor's value: those given (checked against their range), the rest nominal."""
        values = dict(values or {})
        unknown = sorted(set(values) - set(self._by_name))
        if unknown:
            raise ConfigError(self.source, ", ".join(unknown), "factors of this space: " + ", ".join(self.names),
                              "unknown factor")
        return {f.name: f.check(values[f.name], f"{self.source} (perturbation)") if f.name in values
                else f.nominal for f in self.factors}

    def describe(self, values: Mapping[str, float]) -> dict[str, Any]:
        """Values as a person reads them: choice factors as their RGBA, counts as integers, a
        variant as what it changed (`geometry of block 0.8`, or `none` for the task's scene)."""
        out = {}
        for name, value in self.complete(values).items():
            f = self._by_name[name]
            if f.kind == "variant":
                out[name] = f.pool[int(value) - 1].label if value != NO_VARIANT else "none"
            else:
                out[name] = list(f.choices[int(value)]) if f.choices else (int(value) if f.discrete else value)
        return out

    # -- applying it ----------------------------------------------------------------------------
    def apply(self, scene: Scene, values: Mapping[str, float] | None) -> Scene:
        """The scene with every given factor that changes the scene applied; factors at their
        nominal value change nothing, so apply(scene, nominal()) == scene. A variant factor's
        value k > 0 first replaces `scene` by the pool's variant k; the others apply to that."""
        values = self.complete(values)
        for f in self.factors:
            if f.kind == "variant" and values[f.name] != NO_VARIANT:
                scene = f.pool[int(values[f.name]) - 1].scene
        changed = {(f.kind, f.target): (f, values[f.name]) for f in self.factors
                   if f.kind not in RUNTIME_KINDS and f.kind != "variant" and values[f.name] != _identity(f)}
        return _apply(scene, changed) if changed else scene

    def runtime(self, values: Mapping[str, float] | None) -> dict:
        """What is applied outside the scene, by apply_runtime (Task.start): `actuator_gain_scale`,
        `command_latency_s` (added to the twin's fitted latency) and `initial_joint_offsets`
        (joint -> rad)."""
        values = self.complete(values)
        settings = {"actuator_gain_scale": 1.0, "command_latency_s": 0.0, "initial_joint_offsets": {}}
        for f in self.factors:
            if f.kind == "actuator_gain":
                settings["actuator_gain_scale"] = values[f.name]
            elif f.kind == "command_latency":
                settings["command_latency_s"] = values[f.name]
            elif f.kind == "joint_offset":
                settings["initial_joint_offsets"][f.target] = values[f.name]
        return settings


def _identity(f: Factor) -> float:
    """The value at which a factor leaves the scene as it is."""
    kind = KINDS[f.kind][1]
    if kind == _OFFSET or kind == _COUNT or kind == _VARIANT:
        return 0.0
    if kind == _SCALE:
        return 1.0
    return f.nominal  # absolute values and choices: the scene's own (checked when read)


def _yaw_quat(angle: float) -> np.ndarray:
    return np.array([math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)])


def _mul(a, b) -> np.ndarray:
    out = np.empty(4)
    mujoco.mju_mulQuat(out, np.asarray(a, float), np.asarray(b, float))
    return out


def _axis_quat(axis, angle: float) -> np.ndarray:
    axis = np.asarray(axis, float)
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis / np.linalg.norm(axis)])


def _resting_z(obj: ObjectSpec, new_half_height: float) -> float:
    """Keep the bottom where it was (on the table, in a container) as the object grows or shrinks."""
    return obj.pos[2] - obj.half_height + new_half_height


def _clear_of(candidates: Sequence[ObjectSpec], objects: Sequence[ObjectSpec],
              fixtures: Sequence) -> list[ObjectSpec]:
    """The candidates whose footprints start clear of every object and fixture (and of each
    other): a distractor the other factors moved an object onto would start inside it, and the
    physics would throw it off the table before the robot moves."""
    placed = [(np.asarray(o.pos[:2], float), o.footprint_radius) for o in objects] + \
        [(np.asarray(f.pos[:2], float), f.footprint_radius) for f in fixtures]
    kept = []
    for obj in candidates:
        xy = np.asarray(obj.pos[:2], float)
        if all(np.linalg.norm(xy - other) >= radius + obj.footprint_radius for other, radius in placed):
            kept.append(obj)
            placed.append((xy, obj.footprint_radius))
    return kept


def _apply(scene: Scene, changed: dict[tuple[str, str | None], tuple[Factor, float]]) -> Scene:
    def get(kind, target, default):
        return changed[(kind, target)][1] if (kind, target) in changed else default

    def colour(kind, target, default):
        if (kind, target) not in changed:
            return default
        factor, index = changed[(kind, target)]
        return factor.choices[int(index)]

    objects = []
    for obj in scene.objects:
        n = obj.name
        scale = get("object_scale", n, 1.0)
        resized = replace(obj, size=tuple(s * scale for s in obj.size))
        yaw = get("object_yaw", n, 0.0)
        objects.append(replace(
            resized, pos=(obj.pos[0] + get("object_x", n, 0.0), obj.pos[1] + get("object_y", n, 0.0),
                          _resting_z(obj, resized.half_height)),
            quat=tuple(float(q) for q in _mul(_yaw_quat(yaw), obj.quat)) if yaw else obj.quat,
            rgba=colour("object_color", n, obj.rgba),
            mass=obj.mass * scale ** 3 * get("object_mass_scale", n, 1.0),
            friction=get("object_friction", n, obj.friction)))
    fixtures = tuple(replace(
        fx, pos=(fx.pos[0] + get("fixture_x", fx.name, 0.0), fx.pos[1] + get("fixture_y", fx.name, 0.0), fx.pos[2]),
        yaw=fx.yaw + get("fixture_yaw", fx.name, 0.0), door_angle=get("door_angle", fx.name, fx.door_angle),
        rgba=colour("fixture_color", fx.name, fx.rgba)) for fx in scene.fixtures)
    if ("distractors", None) in changed:
        factor, count = changed[("distractors", None)]
        objects.extend(_clear_of(factor.objects[:int(count)], objects, fixtures))

    table = scene.table
    if table is not None:
        table = replace(table, friction=get("table_friction", None, table.friction),
                        rgba=colour("table_color", None, table.rgba))

    cameras = list(scene.cameras)
    for name in sorted({target for kind, target in changed if kind.startswith("camera_")}):
        base = next(c for c in scene.all_cameras() if c.name == name)
        moved = _jitter_camera(base, {axis: get(f"camera_{axis}", name, 0.0)
                                      for axis in ("x", "y", "z", "roll", "pitch", "yaw")})
        index = next((i for i, c in enumerate(cameras) if c.name == name), None)
        if index is None:
            cameras.append(moved)
        else:
            cameras[index] = moved

    lights = []
    for light in scene.lights:
        n = light.name
        gain = get("light_intensity", n, 1.0)
        tilt, azimuth = get("light_tilt", n, 0.0), get("light_azimuth", n, 0.0)
        direction = np.asarray(light.dir, float)
        if tilt:
            axis = (math.sin(azimuth), -math.cos(azimuth), 0.0)  # tips the direction toward the azimuth
            rot = np.empty(9)
            mujoco.mju_quat2Mat(rot, _axis_quat(axis, tilt))
            direction = rot.reshape(3, 3) @ direction
        lights.append(replace(light, diffuse=tuple(min(1.0, c * gain) for c in light.diffuse),
                              dir=tuple(float(v) for v in direction)))
    return replace(scene, objects=tuple(objects), fixtures=fixtures, table=table, cameras=tuple(cameras),
                   lights=tuple(lights))


def _jitter_camera(cam: CameraSpec, jitter: dict[str, float]) -> CameraSpec:
    quat = np.asarray(cam.quat, float) if cam.quat is not None else look_at_quat(cam.pos, cam.lookat)
    # Camera frame: x right, y up, z out of the lens (it looks along -z).
    for axis, key in (((0, 0, 1), "roll"), ((1, 0, 0), "pitch"), ((0, 1, 0), "yaw")):
        if jitter.get(key):
            quat = _mul(quat, _axis_quat(axis, jitter[key]))
    pos = tuple(p + jitter.get(a, 0.0) for p, a in zip(cam.pos, "xyz"))
    return replace(cam, pos=pos, quat=tuple(float(q) for q in quat), lookat=None)


# -- reading -------------------------------------------------------------------------------------
def _targets(scene: Scene) -> dict[str, list[str]]:
    robot = get_robot(scene.robot)
    return {"object": [o.name for o in scene.objects], "fixture": [f.name for f in scene.fixtures],
            "door": [f.name for f in scene.fixtures if f.kind == "hinged_box"],
            "camera": [c.name for c in scene.all_cameras()], "light": [lt.name for lt in scene.lights],
            "joint": list(robot.joint_names)}


def _scene_value(kind: str, target: str | None, scene: Scene) -> float:
    if kind == "object_friction":
        return next(o.friction for o in scene.objects if o.name == target)
    if kind == "door_angle":
        return next(f.door_angle for f in scene.fixtures if f.name == target)
    return scene.table.friction  # table_friction


def _scene_colour(kind: str, target: str | None, scene: Scene) -> tuple[float, ...]:
    if kind == "object_color":
        return next(o.rgba for o in scene.objects if o.name == target)
    if kind == "fixture_color":
        return next(f.rgba for f in scene.fixtures if f.name == target)
    return scene.table.rgba


def _differences(a: Any, b: Any, where: str = "") -> str | None:
    """Where two scenes (or parts of them) differ beyond the 1e-6 that a scene file's rounding
    leaves, ignoring where they were read from (`source`); None where they agree."""
    if hasattr(a, "__dataclass_fields__") and type(a) is type(b):
        for name in a.__dataclass_fields__:
            if name != "source":
                found = _differences(getattr(a, name), getattr(b, name), f"{where}.{name}" if where else name)
                if found:
                    return found
        return None
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b):
            return f"{where}: {len(a)} entries, not {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _differences(x, y, f"{where}[{getattr(x, 'name', i)}]")
            if found:
                return found
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{where}: keys {sorted(a)}, not {sorted(b)}"
        return next((d for d in (_differences(a[k], b[k], f"{where}.{k}") for k in a) if d), None)
    if isinstance(a, (float, int, np.ndarray)) and not isinstance(a, bool) and isinstance(b, (float, int, np.ndarray)):
        return None if np.allclose(a, b, rtol=0.0, atol=1e-6) else f"{where}: {a!r}, not {b!r}"
    return None if a == b else f"{where}: {a!r}, not {b!r}"


def _names(scene: Scene) -> set[str]:
    """What a factor can target in a scene: its objects, fixtures, cameras and lights."""
    return ({o.name for o in scene.objects} | {f.name for f in scene.fixtures} | {c.name for c in scene.all_cameras()}
            | {lt.name for lt in scene.lights})


_READ: dict[str, tuple[tuple[int, int], Any]] = {}  # a pool's files as read, by path, while unchanged


def _read_once(path: Path, read):
    """read(path), reused while the file is unchanged: every task load reads its pool (a few
    dozen YAML files, most of a load's time); scenes are immutable, a pool's mapping only read."""
    st = path.stat()
    key, stamp = str(path.resolve()), (st.st_mtime_ns, st.st_size)
    hit = _READ.get(key)
    if hit is None or hit[0] != stamp:
        hit = _READ[key] = (stamp, read(path))
    return hit[1]


def _read_pool(sec: Section, scene: Scene) -> tuple[PoolVariant, ...]:
    """The variants of a pool.yaml (`r2s2r variants`), checked to be variants of `scene`."""
    where = sec.string("pool")
    path = Path(where) if Path(where).is_absolute() else Path(str(sec.source)).parent / where
    if not path.is_file():
        raise sec.error("pool", "a variant pool (the pool.yaml `r2s2r variants` writes), relative to this file",
                        f"{path} (no such file)")
    top = Section(_read_once(path, load_yaml), str(path))
    top.reject_unknown({"robot", "base", "source", "factors", "variants", "rejected"})
    robot = top.string("robot")
    if robot != scene.robot:
        raise top.error("robot", f"variants of the task's scene, whose robot is {scene.robot}", robot)
    base = _scene_file(top, "base", path.parent)
    differs = _differences(base, scene)
    if differs:
        raise _NotApplicable(sec.string("name"), f"its pool {path} holds variants of {base.source}; build one "
                             f"for this scene with `r2s2r variants {scene.source} --out POOL_DIR`",
                             top.error("base", f"variants of the task's scene ({scene.source}); regenerate the pool "
                                       "from it with `r2s2r variants`", f"variants of another scene ({differs})"))
    pool = []
    for v in top.sections("variants"):
        v.reject_unknown({"index", "factor", "target", "value", "file"})
        index = v.integer("index")
        if index != len(pool) + 1:
            raise v.error("index", f"{len(pool) + 1} (variants numbered 1, 2, ... in order)", index)
        variant = _scene_file(v, "file", path.parent)
        if variant.robot != scene.robot:
            raise v.error("file", f"a variant of the task's scene, whose robot is {scene.robot}",
                          f"{variant.source}, a scene of {variant.robot}")
        missing = sorted(_names(scene) - _names(variant))
        if missing:
            raise v.error("file", "a variant with every object, fixture, camera and light of the task's scene",
                          f"{variant.source}, which lacks {', '.join(missing)}")
        target = v.raw("target", None)
        if target is not None and not isinstance(target, str):
            raise v.error("target", "the name of what the variant changed, or null", target)
        pool.append(PoolVariant(index, v.string("factor"), target, v.number("value"), variant))
    if not pool:
        raise top.error("variants", "at least one variant (every one was rejected?)", [])
    return tuple(pool)


def _scene_file(sec: Section, key: str, folder: Path) -> Scene:
    path = folder / sec.string(key)
    if not path.is_file():
        raise sec.error(key, "a scene file of the pool (relative to pool.yaml)", f"{path} (no such file)")
    return _read_once(path, load_scene)


def _new_name(sec: Section, taken: set[str]) -> str:
    name = sec.string("name")
    if name in taken:
        raise sec.error("name", "a factor name not used before in this space", name)
    return name


def _factor(sec: Section, scene: Scene, taken: set[str]) -> Factor:
    kind = sec.string("kind", choices=tuple(KINDS))
    target_type, value_type = KINDS[kind]
    if value_type == _VARIANT:  # no target, no range: the pool's size; the nominal is always the task's scene
        sec.reject_unknown({"name", "kind", "pool", "description"})
        name = _new_name(sec, taken)
        pool = _read_pool(sec, scene)
        return Factor(name, kind, None, NO_VARIANT, float(len(pool)), NO_VARIANT, pool=pool)
    keys = {"name", "kind", "target", "nominal", "description"}
    keys |= {"choices"} if value_type == _CHOICE else {"range", "log"}
    if kind == "distractors":
        keys |= {"objects"}
    sec.reject_unknown(keys)
    name = _new_name(sec, taken)
    target = None
    if target_type is not None:
        known = _targets(scene)[target_type]
        target = sec.string("target")
        if target not in known:
            article = "an" if target_type[0] in "aeiou" else "a"
            raise _NotApplicable(name, f"no {target_type} {target}",
                                 sec.error("target", f"{article} {target_type} of the scene: " + (", ".join(known) or "none"),
                                           target))
    elif kind in ("table_color", "table_friction") and scene.table is None:
        raise _NotApplicable(name, "no table", sec.error("kind", "a kind that applies to this scene (it has no table)",
                                                          kind))
    if value_type == _CHOICE:
        raw = sec.raw("choices")
        if not isinstance(raw, list) or not raw:
            raise sec.error("choices", "a non-empty list of colours (names or [r, g, b, a])", raw)
        choices = tuple(_colour(sec, f"choices[{i}]", v) for i, v in enumerate(raw))
        factor = Factor(name, kind, target, 0.0, float(len(choices) - 1), 0.0, choices=choices)
        nominal = sec.integer("nominal", 0, minimum=0)
        if nominal >= len(choices):
            raise sec.error("nominal", f"an index into choices (0 to {len(choices) - 1})", nominal)
        own = _scene_colour(kind, target, scene)
        if not np.allclose(choices[nominal], own):
            raise _NotApplicable(name, f"{target or 'the table'} is not {list(choices[nominal])}",
                                 sec.error(f"choices[{nominal}]", f"the scene's own colour {list(own)} (the nominal "
                                                                  "choice)", list(choices[nominal])))
        return replace(factor, nominal=float(nominal))
    low, high = sec.vector("range", 2)
    if low > high:
        raise sec.error("range", "[low, high] with low <= high", [low, high])
    log = sec.boolean("log", False)
    if log and low <= 0:
        raise sec.error("range", "a positive range for a log-scaled factor", [low, high])
    objects: tuple[ObjectSpec, ...] = ()
    if kind == "distractors":
        if low != round(low) or high != round(high) or low < 0:
            raise sec.error("range", "whole numbers of distractors [low, high], low >= 0", [low, high])
        objects = tuple(parse_object(s) for s in sec.sections("objects"))
        if len(objects) < high:
            raise sec.error("objects", f"at least {high:g} objects (the range's high end)", len(objects))
        clash = sorted({o.name for o in objects} & ({o.name for o in scene.objects} | {f.name for f in scene.fixtures}))
        if clash:
            raise sec.error("objects", "names not already in the scene", clash)
    default = {_OFFSET: 0.0, _SCALE: 1.0, _COUNT: low}.get(value_type)
    if value_type == _ABSOLUTE:
        default = _scene_value(kind, target, scene)
    nominal = sec.number("nominal", default)
    if not low <= nominal <= high:
        raise sec.error("nominal" if sec.has("nominal") else "range",
                        f"a range that holds the nominal value {nominal:g}", [low, high])
    return Factor(name, kind, target, low, high, nominal, log, objects=objects)


def _envelope(sec: Section, factors: Sequence[Factor]) -> dict[str, tuple[float, float]]:
    by_name = {f.name: f for f in factors}
    ranges = {}
    for name, value in sec.data.items():
        factor = by_name.get(name)
        if factor is None:
            raise sec.error(str(name), "a factor of this space (" + ", ".join(by_name) + ")", "unknown factor")
        expected = (f"[low, high] with {factor.low:g} <= low < high <= {factor.high:g}"
                    + (", integers" if factor.discrete else ""))
        ok = (isinstance(value, list) and len(value) == 2
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))
        if not ok or not factor.low - 1e-12 <= value[0] < value[1] <= factor.high + 1e-12 \
                or (factor.discrete and any(v != round(v) for v in value)):
            raise sec.error(str(name), expected, value)
        ranges[name] = (float(value[0]), float(value[1]))
    return ranges


def _check_variants(top: Section, factors: Sequence[Factor]) -> None:
    """The other factors act on every variant too: the distractors they add must not take a
    name a variant already has (a variant's own distractors)."""
    variant = next((i for i, f in enumerate(factors) if f.kind == "variant"), None)
    if variant is None:
        return
    for i, f in enumerate(factors):
        for v in factors[variant].pool:
            clash = sorted({o.name for o in f.objects} & _names(v.scene))
            if clash:
                raise top.error(f"factors[{i}].objects", f"names no variant of factors[{variant}]'s pool has "
                                f"(variant {v.index}, {v.scene.source}, has {', '.join(clash)})", clash)


class _NotApplicable(Exception):
    """A factor that acts on something the scene lacks (or a colour it does not have)."""

    def __init__(self, name: str, why: str, error: ConfigError):
        super().__init__(name, why)
        self.name, self.why, self.error = name, why, error


def parse_space(data: dict, scene: Scene, source: str = "<perturbations>",
                skip_missing: bool = False) -> PerturbationSpace:
    """`skip_missing`: leave out the factors that act on what `scene` lacks (another scene than
    the one the space was written for, e.g. a user's own cell), instead of refusing the space."""
    top = Section(data, source)
    top.reject_unknown({"factors", "envelopes", "description", "task"})
    factors: list[Factor] = []
    skipped: list[_NotApplicable] = []
    for sec in top.sections("factors"):
        try:
            factor = _factor(sec, scene, {f.name for f in factors} | {n.name for n in skipped})
        except _NotApplicable as missing:
            if not skip_missing:
                raise missing.error from None
            skipped.append(missing)
            continue
        twin = next((f for f in factors if (f.kind, f.target) == (factor.kind, factor.target)), None)
        if twin is not None:
            raise sec.error("kind", f"a kind and target no other factor has ({twin.name} is {factor.kind} of "
                                    f"{factor.target or 'the scene'})", factor.kind)
        factors.append(factor)
    _check_variants(top, factors)
    envelopes_sec = top.section("envelopes", {})
    gone = {n.name for n in skipped}
    envelopes = {str(name): _envelope(Section({k: v for k, v in envelopes_sec.section(name).data.items() if k not in gone},
                                              envelopes_sec.source, envelopes_sec.key(name)), factors)
                 for name in envelopes_sec.data}
    return PerturbationSpace(tuple(factors), scene, source, envelopes, {n.name: n.why for n in skipped})



def load_space(path: str | Path, scene: Scene, skip_missing: bool = False) -> PerturbationSpace:
    """A PerturbationSpace over `scene` from YAML; errors name the file, the key and what was
    expected. `skip_missing`: see parse_space."""
    resolved = paths.resolve(path)
    return parse_space(load_yaml(resolved), scene, str(resolved), skip_missing)


# -- run-time settings ---------------------------------------------------------------------------
def apply_runtime(twin, settings: Mapping[str, Any]) -> None:
    """Actuator gains, command latency and initial joint positions of a freshly reset twin.
    Idempotent: gains are the twin's own (fitted, where its scene names a dynamics file) times the
    scale, the latency on top of the twin's fitted one, joints from the home pose, so calling it
    twice changes nothing."""
    robot, model, data = twin.robot, twin.model, twin.data
    twin.set_command_latency(float(settings.get("command_latency_s", 0.0)))
    twin.set_actuator_gain_scale(float(settings.get("actuator_gain_scale", 1.0)))
    offsets = settings.get("initial_joint_offsets", {})
    if offsets:
        limits = robot.limits
        for name, offset in offsets.items():
            i = robot.joint_names.index(name)
            value = float(np.clip(robot.home[name] + offset, limits.lower[i], limits.upper[i]))
            data.qpos[model.joint(name).qposadr[0]] = value
            data.qvel[model.joint(name).dofadr[0]] = 0.0
            data.ctrl[model.actuator(name).id] = value
        mujoco.mj_forward(model, data)


__all__ = ["PerturbationSpace", "Factor", "PoolVariant", "NO_VARIANT", "KINDS", "RUNTIME_KINDS", "COLOURS", "parse_space", "load_space",
           "apply_runtime"]
