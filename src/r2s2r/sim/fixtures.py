"""Fixtures: static furniture of a scene built from several primitives, some articulated.

A scene YAML lists them under `fixtures:`; each is welded to the world at `pos` (the centre of
its footprint, on the surface it stands on) turned by `yaw` about the vertical:

    fixtures:
      - {name: bowl, kind: bowl, pos: [0.5, -0.2, 0.0], radius: 0.08, height: 0.05}
      - {name: cabinet, kind: hinged_box, pos: [0.68, -0.1, 0.0], size: [0.34, 0.34, 0.44],
         door_angle: 1.57, hinge: right}

Kinds:
- `bowl`: a flat-bottomed open container (a disc and a ring of wall segments) of inner
  `radius` and `height`. Geoms are named `<name>_bottom`, `<name>_wall<i>`.
- `hinged_box`: a box of outer `size` [depth, width, height] open on its local -x face, with
  a door over that face hinged on a vertical axis at its right (-y) or left (+y) front edge.
  The door is body `<name>_door` (frame on the hinge axis at the box's floor) and hinge joint
  `<name>_hinge`: 0 is closed, positive opens it outward, up to `door_max`. The door starts at
  `door_angle`.

Sizes in metres, angles in radians.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco

from r2s2r.config import Section

KINDS = ("bowl", "hinged_box")
_COMMON = {"name", "kind", "pos", "yaw", "rgba", "friction", "wall"}
_KEYS = {
    "bowl": _COMMON | {"radius", "height", "segments"},
    "hinged_box": _COMMON | {"size", "door_angle", "door_max", "hinge", "door_damping", "door_friction",
                             "door_mass", "door_rgba"},
}


@dataclass(frozen=True)
class FixtureSpec:
    name: str
    kind: str
    pos: tuple[float, float, float]
    yaw: float = 0.0
    rgba: tuple[float, float, float, float] = (0.85, 0.85, 0.8, 1.0)
    friction: float = 1.0
    wall: float = 0.008  # wall thickness
    # bowl
    radius: float = 0.08  # inner
    height: float = 0.05  # outer, floor to rim
    segments: int = 16
    # hinged_box
    size: tuple[float, float, float] = (0.34, 0.34, 0.44)  # outer depth (x), width (y), height (z)
    door_angle: float = 0.0
    door_max: float = 2.8
    hinge: str = "right"
    door_damping: float = 0.4  # N m s / rad
    door_friction: float = 0.05  # N m: the door stays where it is left
    door_mass: float = 0.6
    door_rgba: tuple[float, float, float, float] = (0.3, 0.32, 0.36, 1.0)

    @property
    def bodies(self) -> tuple[str, ...]:
        """The MuJoCo bodies this fixture builds (a hinged box's door is a body of its own)."""
        return (self.name, f"{self.name}_door") if self.kind == "hinged_box" else (self.name,)

    @property
    def footprint_radius(self) -> float:
        """The radius of the circle that bounds it seen from above (a hinged box's door closed)."""
        return self.radius + self.wall if self.kind == "bowl" else math.hypot(self.size[0], self.size[1]) / 2

    @property
    def door_width(self) -> float:
        return self.size[1]

    @property
    def hinge_side(self) -> float:
        """-1 for a hinge on the right (-y) edge, +1 on the left."""
        return -1.0 if self.hinge == "right" else 1.0

    @property
    def inner_extent(self) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
        """hinged_box: the cavity as ((x0, x1), (y0, y1), (z0, z1)) in the box frame."""
        d, w, h = self.size
        t = self.wall
        return (-d / 2, d / 2 - t), (-w / 2 + t, w / 2 - t), (t, h - t)


def parse_fixture(sec: Section) -> FixtureSpec:
    kind = sec.string("kind", choices=KINDS)
    sec.reject_unknown(_KEYS[kind])
    d = FixtureSpec("", kind, (0.0, 0.0, 0.0))
    common = dict(name=sec.string("name"), kind=kind, pos=sec.vector("pos", 3), yaw=sec.number("yaw", 0.0),
                  rgba=sec.vector("rgba", 4, d.rgba), friction=sec.number("friction", d.friction, positive=True),
                  wall=sec.number("wall", d.wall, positive=True, maximum=0.05))
    if kind == "bowl":
        spec = FixtureSpec(**common, radius=sec.number("radius", d.radius, positive=True),
                           height=sec.number("height", d.height, positive=True),
                           segments=sec.integer("segments", d.segments, minimum=6))
        if spec.height <= spec.wall:
            raise sec.error("height", f"a height greater than the wall thickness {spec.wall}", spec.height)
        return spec
    size = sec.vector("size", 3, d.size, positive=True)
    if min(size) <= 3 * common["wall"]:
        raise sec.error("size", f"extents larger than three wall thicknesses ({3 * common['wall']})", list(size))
    door_max = sec.number("door_max", d.door_max, positive=True, maximum=math.pi)
    return FixtureSpec(**common, size=size, door_max=door_max,
                       door_angle=sec.number("door_angle", d.door_angle, minimum=0.0, maximum=door_max),
                       hinge=sec.string("hinge", d.hinge, choices=("right", "left")),
                       door_damping=sec.number("door_damping", d.door_damping, minimum=0.0),
                       door_friction=sec.number("door_friction", d.door_friction, minimum=0.0),
                       door_mass=sec.number("door_mass", d.door_mass, positive=True),
                       door_rgba=sec.vector("door_rgba", 4, d.door_rgba))


def fixture_dict(spec: FixtureSpec) -> dict:
    """A fixture as the YAML mapping parse_fixture reads back to it."""
    out = {}
    for key in ("name", "kind") + tuple(sorted(_KEYS[spec.kind] - {"name", "kind"})):
        value = getattr(spec, key)
        out[key] = [float(v) for v in value] if isinstance(value, tuple) else value
    return out


def _yaw_quat(yaw: float) -> list[float]:
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


def _box(body: mujoco.MjsBody, name: str, centre, half, fixture: FixtureSpec) -> None:
    body.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_BOX, pos=list(centre), size=list(half),
                  rgba=list(fixture.rgba), friction=[fixture.friction, 0.005, 0.0001])


def add_fixture(world: mujoco.MjsBody, fixture: FixtureSpec) -> mujoco.MjsBody:
    body = world.add_body(name=fixture.name, pos=list(fixture.pos), quat=_yaw_quat(fixture.yaw))
    if fixture.kind == "bowl":
        _add_bowl(body, fixture)
    else:
        _add_hinged_box(body, fixture)
    return body


def _add_bowl(body: mujoco.MjsBody, f: FixtureSpec) -> None:
    t, r, n = f.wall, f.radius, f.segments
    body.add_geom(name=f"{f.name}_bottom", type=mujoco.mjtGeom.mjGEOM_CYLINDER, pos=[0, 0, t / 2],
                  size=[r + t, t / 2, 0], rgba=list(f.rgba), friction=[f.friction, 0.005, 0.0001])
    # Segments just long enough to close the ring at their inner face.
    half_length = (r + t) * math.tan(math.pi / n)
    for i in range(n):
        a = 2 * math.pi * i / n
        body.add_geom(name=f"{f.name}_wall{i}", type=mujoco.mjtGeom.mjGEOM_BOX,
                      pos=[(r + t / 2) * math.cos(a), (r + t / 2) * math.sin(a), f.height / 2],
                      size=[t / 2, half_length, f.height / 2], quat=_yaw_quat(a), rgba=list(f.rgba),
                      friction=[f.friction, 0.005, 0.0001])


def _add_hinged_box(body: mujoco.MjsBody, f: FixtureSpec) -> None:
    d, w, h = f.size
    t = f.wall
    _box(body, f"{f.name}_floor", (0, 0, t / 2), (d / 2, w / 2, t / 2), f)
    _box(body, f"{f.name}_top", (0, 0, h - t / 2), (d / 2, w / 2, t / 2), f)
    _box(body, f"{f.name}_back", (d / 2 - t / 2, 0, h / 2), (t / 2, w / 2, h / 2 - t), f)
    for side, label in ((-1, "right"), (1, "left")):
        _box(body, f"{f.name}_{label}", (-t / 2, side * (w / 2 - t / 2), h / 2), (d / 2 - t / 2, t / 2, h / 2 - t), f)
    # The door: its frame on the hinge axis, the panel reaching across the opening when closed.
    # Built at its starting angle with that angle as the joint's reference, so the model's
    # reference configuration (what a reset restores) has the door there and qpos 0 is closed.
    side = f.hinge_side
    a = f.door_angle
    door = body.add_body(name=f.bodies[1], pos=[-d / 2 - t / 2, side * w / 2, 0.0],
                         quat=[math.cos(a / 2), 0.0, 0.0, -side * math.sin(a / 2)])
    door.add_joint(name=f"{f.name}_hinge", type=mujoco.mjtJoint.mjJNT_HINGE, axis=[0, 0, -side],
                   range=[0.0, f.door_max], ref=a, damping=f.door_damping, frictionloss=f.door_friction,
                   armature=0.005)
    gap = 0.004  # under the door: it swings clear of the surface the box stands on
    door.add_geom(name=f"{f.name}_door", type=mujoco.mjtGeom.mjGEOM_BOX, pos=[0, -side * w / 2, (h + gap) / 2],
                  size=[t / 2, w / 2, (h - gap) / 2], mass=f.door_mass, rgba=list(f.door_rgba),
                  friction=[f.friction, 0.005, 0.0001])


__all__ = ["FixtureSpec", "KINDS", "parse_fixture", "fixture_dict", "add_fixture"]
