"""Task-conditioned variants of a validated scene, one factor at a time.

Each variant changes one factor of one target by one value, and carries the change through
everything that depends on it:

| factor | target | value | what changes with it |
|---|---|---|---|
| `geometry` | object | scale of every extent | the object's collision and visual geom (one primitive is both), its mass (same density), its height above the support (it stays on it) |
| `pose_x`, `pose_y` | object | offset, m | its position |
| `pose_yaw` | object | rotation about the vertical, rad | its orientation |
| `support_height` | - | offset of the support's top, m | the table, every object resting on it, every fixture on it, the cameras mounted in the world, the robot's own world cameras included (they look at the same cell), when the robot stands on a pedestal beside the support: the work surface moves relative to the robot. When the robot's base stands on the support (in its footprint, at its top), as an arm bolted to its table does, the support carries the robot's mount and the whole cell rises together: in the robot's frame, which the twin and its policies share, only the room moves, so the lights move by -value and every pose stays |
| `material` | object | sliding friction | the object's friction (it governs its contacts in alignment's twins) |
| `colour` | object | index into `COLOURS` | its RGBA |
| `distractors` | - | how many small boxes are added in free spots of the support (away from the objects, the fixtures and the robot's base) | new objects `variant_distractor_<i>`, validated like the rest |
| `background` | - | index into `COLOURS` | the table's colour |
| `lighting` | light | diffuse scale | the light's intensity |

`generate` re-validates every variant (real2sim.validate) and keeps those that pass, each
with its factor, target and value; the rest are listed with the checks that failed.

The kept pool is what the evaluation's perturbation spaces draw from. `write_pool` (the
`r2s2r variants` command) stores it in a folder:

    pool.yaml                       robot, base, factors, variants (index, factor, target, value,
                                    file), rejected (factor, target, value, why, failed checks)
    base.yaml                       the scene the variants are of
    01_geometry_block_0.8.yaml ...  one scene YAML per kept variant (sim.scene.load_scene reads it)

and a perturbation space's `kind: variant` factor (search.perturbations) names that pool.yaml:
its value k > 0 starts the trial from variant k instead of the task's scene (0: the task's
scene itself), with the space's other factors applied on top. The stored scenes are what
was validated: each variant is rounded to the scene file's precision before its checks.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import yaml

from r2s2r.real2sim.reconstruct import scene_dict
from r2s2r.real2sim.validate import SceneInvalid, validate
from r2s2r.robots import get_robot
from r2s2r.search.perturbations import COLOURS
from r2s2r.sim.fixtures import FixtureSpec
from r2s2r.sim.scene import ObjectSpec, Scene, parse_scene

FACTORS = ("geometry", "pose_x", "pose_y", "pose_yaw", "support_height", "material", "colour", "distractors",
           "background", "lighting")
_COLOUR_NAMES = sorted(COLOURS)
DEFAULT_VALUES = {
    "geometry": (0.8, 1.2), "pose_x": (-0.05, 0.05), "pose_y": (-0.05, 0.05), "pose_yaw": (-0.6, 0.6),
    "support_height": (-0.03, 0.03), "material": (0.3, 1.5), "colour": (0, 2), "distractors": (1, 2),
    "background": (1, 3), "lighting": (0.6, 1.4),
}


@dataclass(frozen=True)
class Variant:
    factor: str
    target: str | None
    value: float
    scene: Scene


ON_SUPPORT_M = 0.005  # how close to the support's top a bottom is that stands on it


def _on_support_top(scene: Scene, bottom_z: float) -> bool:
    return scene.table is not None and abs(bottom_z - scene.table.height) < ON_SUPPORT_M


def _resting_on_support(scene: Scene, obj: ObjectSpec) -> bool:
    return _on_support_top(scene, obj.pos[2] - obj.half_height)


def _robot_on_support(scene: Scene) -> bool:
    """The robot's base stands on the support: within its footprint, at its top, as an arm
    bolted to its table does; not one on a pedestal beside it."""
    t = scene.table
    x, y, z = get_robot(scene.robot).mount_pos
    inside = abs(x - t.center[0]) <= t.size[0] / 2 and abs(y - t.center[1]) <= t.size[1] / 2
    return inside and _on_support_top(scene, z)


def _raised(item, dz: float):
    """A positioned spec (object, fixture, camera, light) moved up by dz."""
    return replace(item, pos=(item.pos[0], item.pos[1], item.pos[2] + dz))


def _yaw_quat(quat, dyaw: float) -> tuple[float, ...]:
    w, x, y, z = quat
    c, s = math.cos(dyaw / 2), math.sin(dyaw / 2)
    # q_yaw * q (a turn about the world vertical)
    return (c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w)


def apply(scene: Scene, factor: str, target: str | None, value: float) -> Scene:
    """`scene` with one factor changed (see the module docstring)."""
    if factor not in FACTORS:
        raise ValueError(f"variant factor {factor!r}; expected one of {', '.join(FACTORS)}")
    objects = list(scene.objects)
    names = [o.name for o in objects]

    def index() -> int:
        if target not in names:
            raise ValueError(f"variant {factor}: no object {target!r}; objects: {', '.join(names)}")
        return names.index(target)

    if factor == "geometry":
        k = index()
        o = objects[k]
        size = tuple(s * value for s in o.size)
        new = replace(o, size=size, mass=o.mass * value ** 3)
        if _resting_on_support(scene, o):
            new = _raised(new, new.half_height - o.half_height)  # its bottom stays on the support
        objects[k] = new
    elif factor in ("pose_x", "pose_y"):
        k = index()
        o = objects[k]
        axis = 0 if factor == "pose_x" else 1
        pos = list(o.pos)
        pos[axis] += value
        objects[k] = replace(o, pos=tuple(pos))
    elif factor == "pose_yaw":
        k = index()
        objects[k] = replace(objects[k], quat=_yaw_quat(objects[k].quat, value))
    elif factor == "support_height":
        if scene.table is None:
            raise ValueError("variant support_height: the scene has no table")
        if _robot_on_support(scene):
            # The support carries the robot's mount, so the whole cell rises together: in the
            # robot's frame, the one the twin and its policies work in, only the room moves.
            return replace(scene, lights=tuple(_raised(lt, -value) for lt in scene.lights))
        objects = [_raised(o, value) if _resting_on_support(scene, o) else o for o in objects]
        table = replace(scene.table, height=scene.table.height + value)
        fixtures = tuple(_raised(f, value) if _on_support_top(scene, f.pos[2]) else f for f in scene.fixtures)
        # The world cameras, the robot's own included (a scene camera of the same name overrides
        # one of the robot's), rise with the cell; cameras on the robot stay on it.
        own = {c.name for c in scene.cameras}
        robot_world = tuple(c for c in scene.all_cameras() if c.name not in own and c.parent is None)
        cameras = tuple(replace(_raised(c, value),
                                lookat=None if c.lookat is None else (c.lookat[0], c.lookat[1], c.lookat[2] + value))
                        if c.parent is None else c for c in scene.cameras + robot_world)
        return replace(scene, table=table, objects=tuple(objects), fixtures=fixtures, cameras=cameras)
    elif factor == "material":
        k = index()
        objects[k] = replace(objects[k], friction=float(value))
    elif factor == "colour":
        k = index()
        objects[k] = replace(objects[k], rgba=COLOURS[_COLOUR_NAMES[int(value) % len(_COLOUR_NAMES)]])
    elif factor == "distractors":
        objects += _distractors(scene, int(value))
    elif factor == "background":
        if scene.table is None:
            raise ValueError("variant background: the scene has no table")
        return replace(scene, table=replace(scene.table, rgba=COLOURS[_COLOUR_NAMES[int(value) % len(_COLOUR_NAMES)]]))
    elif factor == "lighting":
        lights = [lt.name for lt in scene.lights]
        name = target or (lights[0] if lights else None)
        if name not in lights:
            raise ValueError(f"variant lighting: no light {target!r}; lights: {', '.join(lights) or 'none'}")
        return replace(scene, lights=tuple(replace(lt, diffuse=tuple(min(1.0, c * value) for c in lt.diffuse))
                                           if lt.name == name else lt for lt in scene.lights))
    return scene.with_objects(objects)


def _distractors(scene: Scene, count: int) -> list[ObjectSpec]:
    """Small boxes on free spots of the support, away from every object and the robot's base."""
    if scene.table is None:
        raise ValueError("variant distractors: the scene has no table to put them on")
    t = scene.table
    rng = np.random.default_rng(scene.seed + count)
    taken = [np.asarray(o.pos[:2]) for o in scene.objects] + [np.asarray(f.pos[:2]) for f in scene.fixtures] \
        + [np.zeros(2)]
    out = []
    for _ in range(200):
        if len(out) == count:
            break
        p = np.array([t.center[0] + rng.uniform(-0.35, 0.35) * t.size[0],
                      t.center[1] + rng.uniform(-0.35, 0.35) * t.size[1]])
        if min(np.linalg.norm(p - q) for q in taken) < 0.12:
            continue
        taken.append(p)
        name = f"variant_distractor_{len(out)}"  # not distractor_<i>: a perturbation space may add those
        out.append(ObjectSpec(name=name, shape="box", size=(0.03, 0.03, 0.03), mass=0.03,
                              rgba=COLOURS["grey"], pos=(float(p[0]), float(p[1]), t.height + 0.015)))
    return out


def candidates(scene: Scene, factors: Sequence[str] | None = None) -> list[tuple[str, str | None, float]]:
    """(factor, target, value) of the default variants: each object factor for each movable object."""
    out = []
    movable = [o.name for o in scene.objects if not o.fixed]
    for factor in factors or FACTORS:
        if factor not in FACTORS:
            raise ValueError(f"variant factor {factor!r}; expected one of {', '.join(FACTORS)}")
        targets: Iterable[str | None] = movable if factor in ("geometry", "pose_x", "pose_y", "pose_yaw", "material",
                                                              "colour") else [None]
        for target in targets:
            for value in DEFAULT_VALUES[factor]:
                out.append((factor, target, float(value)))
    return out


def generate(scene: Scene, factors: Sequence[str] | None = None, grasp: bool = True,
             plan: Sequence[tuple[str, str | None, float]] | None = None,
             prepare: Callable[[Scene], Scene] | None = None) -> tuple[list[Variant], list[dict]]:
    """Validated variants (kept) and the rejected ones with the reason (`why`) and the checks
    that failed (`failed`: check, object, detail). `prepare` turns each variant into the scene
    that is validated and kept (write_pool: the scene as its file reads back)."""
    kept, rejected = [], []
    for factor, target, value in plan if plan is not None else candidates(scene, factors):
        variant = apply(scene, factor, target, value)
        if prepare is not None:
            variant = prepare(variant)
        result = validate(variant, grasp=grasp)
        if result.passed:
            kept.append(Variant(factor, target, value, variant))
        else:
            rejected.append({"factor": factor, "target": target, "value": value, "why": result.message(),
                             "failed": [r for r in result.report() if not r["passed"]]})
    return kept, rejected


# -- the stored pool ---------------------------------------------------------------------------------
_FIXTURE_KEYS = {"bowl": ("radius", "height", "segments"),
                 "hinged_box": ("size", "door_angle", "door_max", "hinge", "door_damping", "door_friction",
                                "door_mass", "door_rgba")}


def _plain(value):
    if isinstance(value, (tuple, list)):
        return [round(float(v), 6) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value


def _fixture_dict(f: FixtureSpec) -> dict:
    keys = ("name", "kind", "pos", "yaw", "rgba", "friction", "wall") + _FIXTURE_KEYS[f.kind]
    return {k: _plain(getattr(f, k)) for k in keys}


def scene_data(scene: Scene, folder: str | Path) -> dict:
    """The scene as the mapping sim.scene.parse_scene reads: reconstruct.scene_dict (what
    `r2s2r reconstruct` writes) with what a reconstructed scene has none of, its fixtures and
    seed, and its dynamics file named relative to `folder` (where the YAML goes)."""
    data = scene_dict(scene)
    if scene.fixtures:
        data["fixtures"] = [_fixture_dict(f) for f in scene.fixtures]
    if scene.seed:
        data["seed"] = scene.seed
    if scene.dynamics is not None:
        data["dynamics"] = os.path.relpath(Path(scene.dynamics.source).resolve(), Path(folder).resolve())
    return data


def write_scene(scene: Scene, path: str | Path, header: str = "") -> Path:
    """A scene YAML that load_scene reads back to `scene` (to the file's 1e-6 precision)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(scene_data(scene, path.parent), sort_keys=False, default_flow_style=None, width=110)
    path.write_text((header.rstrip() + "\n" if header else "") + text)
    return path


def stored(scene: Scene, folder: str | Path) -> Scene:
    """`scene` as a scene file in `folder` reads back: rounded as the file rounds it."""
    folder = Path(folder)
    data = scene_data(scene, folder)
    data.pop("dynamics", None)  # the same file either way: keep the loaded spec
    return replace(parse_scene(data, str(folder / "<variant>")), dynamics=scene.dynamics)


def _file_name(index: int, variant: Variant) -> str:
    return f"{index:02d}_{variant.factor}_{variant.target or 'scene'}_{variant.value:g}.yaml"


def write_pool(scene: Scene, out_dir: str | Path, factors: Sequence[str] | None = None, grasp: bool = True,
               source: str | None = None) -> tuple[Path, list[Variant], list[dict]]:
    """Validate `scene`, generate its variants and store the kept ones with pool.yaml (see the
    module docstring); returns pool.yaml's path, the kept variants and the rejected ones. An
    invalid scene raises SceneInvalid (no pool of it is written)."""
    out = Path(out_dir)
    result = validate(scene, grasp=grasp)
    if not result.passed:
        raise SceneInvalid(f"{source or scene.source}: the scene fails validation ({result.message()}); "
                           "variants are made of a validated scene")
    kept, rejected = generate(scene, factors, grasp=grasp, prepare=lambda s: stored(s, out))
    out.mkdir(parents=True, exist_ok=True)
    pool_path = out / "pool.yaml"
    if pool_path.is_file():  # a pool written before: its scene files go, the others in the folder stay
        old = yaml.safe_load(pool_path.read_text()) or {}
        for entry in old.get("variants", []) if isinstance(old, dict) else []:
            if isinstance(entry, dict) and isinstance(entry.get("file"), str) and "/" not in entry["file"]:
                (out / entry["file"]).unlink(missing_ok=True)
    origin = source or scene.source
    write_scene(scene, out / "base.yaml", f"# The scene the variants in pool.yaml are of: {origin}.")
    entries = []
    for index, v in enumerate(kept, 1):
        name = _file_name(index, v)
        write_scene(v.scene, out / name, f"# Variant {index} of {origin}: {v.factor}"
                                         f"{' of ' + v.target if v.target else ''} {v.value:g} (pool.yaml).")
        entries.append({"index": index, "factor": v.factor, "target": v.target, "value": float(v.value),
                        "file": name})
    pool = {"robot": scene.robot, "source": str(origin), "base": "base.yaml",
            "factors": list(factors or FACTORS),
            "variants": entries,
            "rejected": [{**r, "value": float(r["value"])} for r in rejected]}
    header = ("# Validated variants of one scene, one factor at a time (`r2s2r variants`, real2sim.variants).\n"
              "# A perturbation factor `{kind: variant, pool: <this file>}` starts a trial from variant\n"
              "# `index` (its value; 0 is the scene itself, base.yaml) before the space's other factors apply.\n")
    pool_path.write_text(header + yaml.safe_dump(pool, sort_keys=False, default_flow_style=None, width=110))
    return pool_path, kept, rejected


__all__ = ["Variant", "apply", "generate", "candidates", "write_pool", "write_scene", "scene_data", "stored",
           "FACTORS"]
