"""The cell's collision model in the command path: which commanded poses, and which braking
paths, would bring the robot into contact with the cell's fixed geometry or with itself.

Every backend's control loop (hardware.loop.ControlLoop) asks it before it moves: a target or a
trajectory point that lies within `margin` of the table, a fixture or a fixed object, or within
SELF_MARGIN_M of another of the robot's own links, is refused, and a motion whose braking path
would is stopped short, while the arm can still stop outside. Objects that move (free bodies, a
door) are not obstacles: manipulating them is the task. For the same reason the fingers may
touch, FINGER_DEPTH_M deep at most, and two hands may meet, HAND_DEPTH_M deep (a handover).

The model is the scene's own MuJoCo model (the twin's, or for a real arm the cell the driver is
given), checked with MuJoCo's collision pipeline and geom margins, so the guard and the twin agree
on every shape. Robot link pairs that are always in contact (neighbours, links that overlap at
every sampled pose) are left out, as MoveIt's setup assistant leaves them out of its matrix.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import mujoco
import numpy as np

from r2s2r.robots import RobotSpec, get_robot
from r2s2r.robots.model import home_qpos, joint_bodies, subtree
from r2s2r.sim.scene import Scene

# How close (m) the robot's links may come to the cell's fixed geometry.
DEFAULT_MARGIN_M = 0.01
# How close one of the robot's links may come to another: a wrist's links are built close
# together (the xArm7's link 5 and link 7 are within 10 mm of each other in 94 % of random poses,
# within 2 mm in 12 %), and the guard is no finer than the collision shapes.
SELF_MARGIN_M = 0.002
# Two hands may meet this deep (in the model's shapes), slowly: ALOHA's handover puts one arm's
# finger 11 mm into the other's wrist camera.
HAND_DEPTH_M = 0.015
# Fingers and hands touch only while every joint moves at this share of its speed limit or less
# (ALOHA's: 0.31 rad/s, about 0.15 m/s at the hand); faster, they keep the margins, so a motion
# toward a touch is slowed to this first (its braking path would enter a margin: it stops short).
SLOW_SHARE = 0.1
# An arm already in contact may go this much deeper on its way out (CollisionGuard.blocks).
CONTACT_SLACK_M = 0.01
# The fingers may touch the cell and the robot (they pick objects off the table: an expert's grasp
# puts ALOHA's fingertips 2 mm above it, a smaller block lower; in a handover one arm's fingers
# meet the other's wrist), pressed in no deeper than this.
FINGER_DEPTH_M = 0.003
# A gripper command's sweep of the fingers is checked at openings this far apart (m).
OPENING_STEP_M = 0.004
# Link pairs in contact at home or in this share of random poses are never checked.
_SAMPLED_POSES = 300
_ALWAYS_SHARE = 0.95
_CACHE_SIZE = 16


@dataclass(frozen=True)
class Clearance:
    """The closest approach of one check: `distance` in metres (inf: nothing within the margin)
    between the robot body `robot_body` and `other` (a body of the cell or of the robot)."""

    distance: float
    robot_body: str = ""
    other: str = ""

    @property
    def clear(self) -> bool:
        return math.isinf(self.distance)

    def describe(self) -> str:
        if self.clear:
            return "clear"
        contact = (f"{-self.distance * 1000:.1f} mm into" if self.distance < 0 else
                   f"within {self.distance * 1000:.1f} mm of")
        return f"{self.robot_body} {contact} {self.other}"


CLEAR = Clearance(math.inf)


class CollisionGuard:
    """Clearance checks for one robot in one cell. Joint vectors are in `robot.joint_names`
    order; gripper openings (m, one per gripper) place the fingers."""

    def __init__(self, robot: RobotSpec, scene: Scene, margin: float = DEFAULT_MARGIN_M, seed: int = 0):
        if not margin > 0:
            raise ValueError(f"collision margin is {margin}; expected a positive distance in metres")
        from r2s2r.sim.twin import build_scene_spec  # the twin builds on this module's users

        self.robot = robot
        self.margin = float(margin)
        self.self_margin = min(SELF_MARGIN_M, self.margin)
        self.cell = scene.source  # named in refusals
        self._lock = threading.Lock()  # one scratch MjData, shared by the loops of one cell
        spec = build_scene_spec(scene, privileged_sensors=False)
        m = spec.compile()
        self.model, self.data = m, mujoco.MjData(m)
        self._robot_body = subtree(m, [m.body(robot.base_link).id])
        self._finger = np.zeros(m.nbody, dtype=bool)  # bodies a finger joint moves
        self._finger[joint_bodies(m, robot.gripper_joint_names)] = True
        # Pairs of bodies of two hands (each gripper's fingers and what is welded to their base, a
        # wrist camera): they meet around an object handed over.
        hands = []
        for g in robot.grippers:
            fingers = joint_bodies(m, g.joints)
            base = m.body_weldid[m.body_parentid[fingers[0]]]
            hands.append(np.union1d(fingers, np.flatnonzero(m.body_weldid == base)))
        self._hand_pair = np.zeros((m.nbody, m.nbody), dtype=bool)
        for i, a in enumerate(hands):
            for b in hands[i + 1:]:
                self._hand_pair[np.ix_(a, b)] = self._hand_pair[np.ix_(b, a)] = True
        adr = [int(m.joint(n).qposadr[0]) for n in robot.joint_names]
        consecutive = adr == list(range(adr[0], adr[0] + len(adr)))
        self._arm_qpos = slice(adr[0], adr[0] + len(adr)) if consecutive else np.array(adr)
        self._fingers = [np.array([m.joint(n).qposadr[0] for n in g.joints], dtype=int) for g in robot.grippers]
        self._base_qpos = home_qpos(robot, m)
        self._configure(m)
        # Robot body pairs (either order) the guard does not check; then a model that leaves them out
        # of its collision pipeline, so that a clear pose finds no contact at all (the cheap case).
        self._ignored = np.zeros((m.nbody, m.nbody), dtype=bool)
        self._learn_ignored_pairs(np.random.default_rng(seed))
        # MuJoCo leaves parent and child out unless the parent is welded to the world (a base link).
        for child in np.flatnonzero(self._robot_body):
            parent = m.body_parentid[child]
            if self._robot_body[parent]:
                self._ignored[parent, child] = self._ignored[child, parent] = True
        for b1, b2 in np.argwhere(np.triu(self._ignored)):
            spec.add_exclude(bodyname1=m.body(b1).name, bodyname2=m.body(b2).name)
        self.model = spec.compile()
        self.data = mujoco.MjData(self.model)
        self._configure(self.model)

    def _configure(self, m: mujoco.MjModel) -> None:
        """Collide only the robot and what is welded to the world, each pair reported within the
        larger of its geoms' margins: the robot's links SELF_MARGIN_M, the cell's `margin`."""
        static = m.body_weldid == 0  # the table, fixtures' shells, fixed objects
        robot = self._robot_body[m.geom_bodyid]
        checked = robot | static[m.geom_bodyid]
        m.geom_contype[:] = np.where(checked, 1, 0)
        m.geom_conaffinity[:] = np.where(checked, 1, 0)
        m.geom_margin[:] = np.where(robot, self.self_margin, np.where(checked, self.margin, 0.0))
        m.geom_gap[:] = 0.0

    # -- set-up ------------------------------------------------------------------------------------
    def _robot_pairs(self) -> set[tuple[int, int]]:
        """Robot-robot body pairs within the self margin in the current data."""
        pairs = set()
        d = self.data
        for (g1, g2), dist in zip(d.contact.geom[:d.ncon], d.contact.dist[:d.ncon]):
            b1, b2 = self.model.geom_bodyid[g1], self.model.geom_bodyid[g2]
            if self._robot_body[b1] and self._robot_body[b2] and dist < self.self_margin:
                pairs.add((min(b1, b2), max(b1, b2)))
        return pairs

    def _learn_ignored_pairs(self, rng: np.random.Generator) -> None:
        m, d = self.model, self.data
        d.qpos[:] = self._base_qpos
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        at_home = self._robot_pairs()
        lower, upper = self.robot.limits.lower, self.robot.limits.upper
        counts: dict[tuple[int, int], int] = {}
        for _ in range(_SAMPLED_POSES):
            d.qpos[:] = self._base_qpos
            d.qpos[self._arm_qpos] = rng.uniform(lower, upper)
            mujoco.mj_kinematics(m, d)
            mujoco.mj_collision(m, d)
            for pair in self._robot_pairs():
                counts[pair] = counts.get(pair, 0) + 1
        always = {p for p, n in counts.items() if n >= _ALWAYS_SHARE * _SAMPLED_POSES}
        for b1, b2 in at_home | always:
            self._ignored[b1, b2] = self._ignored[b2, b1] = True

    # -- checks ------------------------------------------------------------------------------------
    def _place_fingers(self, openings) -> None:
        if openings is not None:
            for adr, opening in zip(self._fingers, openings):
                if np.isfinite(opening):
                    self.data.qpos[adr] = opening / len(adr)

    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The body pairs (n, 2) the collision pipeline finds at the pose in `data`, and their distances
        (a view of `data`: read them under the lock)."""
        m, d = self.model, self.data
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        return m.geom_bodyid[d.contact.geom[:d.ncon]], d.contact.dist[:d.ncon]

    def _closest(self, slow: bool, margin: float | None = None) -> Clearance:
        bodies, dist = self._pairs()
        if len(dist) == 0:
            return CLEAR
        # MuJoCo keeps a pair a little beyond its margin; only what is within it counts.
        own = self._robot_body[bodies[:, 0]] & self._robot_body[bodies[:, 1]]
        allowed = np.where(own, self.self_margin, self.margin if margin is None else min(margin, self.margin))
        if slow:  # touching is for slow motion only: at speed, a finger or a hand keeps the margins
            allowed = np.where(self._finger[bodies].any(axis=1), -FINGER_DEPTH_M, allowed)
            allowed = np.where(self._hand_pair[bodies[:, 0], bodies[:, 1]], -HAND_DEPTH_M, allowed)
        keep = ~self._ignored[bodies[:, 0], bodies[:, 1]] & (dist < allowed)
        if not keep.any():
            return CLEAR
        k = np.flatnonzero(keep)[np.argmin(dist[keep])]
        return self._named(float(dist[k]), *bodies[k])

    def _named(self, distance: float, b1: int, b2: int) -> Clearance:
        if not self._robot_body[b1]:
            b1, b2 = b2, b1
        name = self.model.body(b2).name
        other = name if not self._robot_body[b2] else f"{name} (its own link)"
        return Clearance(distance, self.model.body(b1).name, other)

    def contact(self, joints, openings=None) -> tuple[Clearance, str]:
        """The deepest contact at a pose, of the robot with the cell or with itself, and its kind:
        "" (none), "finger" or "hands" (touches that slow motion may make) or "link" (one the guard
        never allows). For measured poses: where an arm touched, and whether it was let."""
        with self._lock:
            self._place_fingers(openings)
            self.data.qpos[self._arm_qpos] = np.asarray(joints, dtype=float)
            bodies, dist = self._pairs()
            dist = dist.copy()
        touching = (dist < 0) & ~self._ignored[bodies[:, 0], bodies[:, 1]]
        if not touching.any():
            return CLEAR, ""
        k = np.flatnonzero(touching)[np.argmin(dist[touching])]
        b1, b2 = bodies[k]
        kind = "hands" if self._hand_pair[b1, b2] else "finger" if self._finger[[b1, b2]].any() else "link"
        return self._named(float(dist[k]), b1, b2), kind

    def clearance(self, joints, openings=None, slow: bool = True, margin: float | None = None) -> Clearance:
        """The closest approach at one pose (CLEAR when nothing is within the margins)."""
        return self.check_path(np.asarray(joints, dtype=float)[None, :], openings, slow, margin)[0]

    def check_path(self, poses: np.ndarray, openings=None, slow: bool = True,
                   margin: float | None = None) -> tuple[Clearance, Clearance]:
        """The closest approach at the first row of `poses` and over all of them. `slow`: the arm
        moves at SLOW_SHARE of its speed limits or less, and the fingers and hands may touch.
        `margin`: a narrower margin to the cell than the guard's."""
        worst = first = CLEAR
        qpos, arm = self.data.qpos, self._arm_qpos
        with self._lock:
            self._place_fingers(openings)
            for k, row in enumerate(np.atleast_2d(poses)):
                qpos[arm] = row
                found = self._closest(slow, margin)
                if k == 0:
                    first = found
                if found.distance < worst.distance:
                    worst = found
        return first, worst

    def blocks(self, found: Clearance, reference: Clearance) -> bool:
        """Whether `found` is too close: within a margin and closer than `reference` (where the arm
        already is), so an arm inside a margin can always move away or along, never closer. An arm
        found already in contact (a measured pose, a model that is off) may move within
        CONTACT_SLACK_M of its depth: a deep overlap's depth is no measure of the way out."""
        slack = CONTACT_SLACK_M if reference.distance < 0 else 1e-6
        return found.distance < reference.distance - slack

    @staticmethod
    def clearer(a: Clearance, b: Clearance) -> Clearance:
        """The reference to keep after a move from `a` to `b`: the clearer of the two, so that slack
        given in contact never adds up over cycles."""
        return a if a.distance >= b.distance else b

    @staticmethod
    def slow(velocity, max_velocity) -> bool:
        """Whether a motion at `velocity` is slow enough for fingers and hands to touch."""
        return bool(np.all(np.abs(velocity) <= SLOW_SHARE * np.asarray(max_velocity)))

    def target_error(self, label: str, joints, openings, reference: Clearance) -> str:
        """Why a target pose is refused ('' when it is not): it lies within a margin, closer than
        `reference` (the clearance the arm's current setpoint is held to)."""
        found = self.clearance(joints, openings)
        if found.clear or not self.blocks(found, reference):
            return ""
        return (f"{label}: the target puts {found.describe()}; expected a pose at least "
                f"{self.margin * 1000:.0f} mm clear of the cell ({self.cell}) and "
                f"{self.self_margin * 1000:.0f} mm between the robot's own links (fingers may touch, "
                f"{FINGER_DEPTH_M * 1000:.0f} mm deep at most)")

    def opening_error(self, label: str, joints, openings, new_openings) -> str:
        """Why a gripper command is refused ('' when it is not): at the arm's pose `joints`, moving
        the fingers from `openings` to `new_openings` brings them within the self margin of anything
        and closer than they are. Fingers travel at their gripper's full speed, so they may not
        touch (an opening that touches is an impact); the narrow margin leaves a grasp near the
        table, or a hand that opens beside another, free to move."""
        start, end = np.asarray(openings, dtype=float), np.asarray(new_openings, dtype=float)
        # The fingers sweep every opening in between: one may pass another link on its way.
        steps = 1 + int(np.ceil(np.nanmax(np.abs(end - start), initial=0.0) / OPENING_STEP_M))
        found = reference = self.clearance(joints, start, slow=False, margin=self.self_margin)
        for share in np.linspace(0.0, 1.0, steps + 1)[1:]:
            here = self.clearance(joints, start + share * (end - start), slow=False, margin=self.self_margin)
            if here.distance < found.distance:
                found = here
        if found.clear or not self.blocks(found, reference):
            return ""
        return (f"{label}: the opening puts {found.describe()}; expected fingers that stay "
                f"{self.self_margin * 1000:.0f} mm clear of the cell ({self.cell}) and the robot's "
                f"other links, or come no closer")


_guards: OrderedDict = OrderedDict()


def _static_key(scene: Scene) -> tuple:
    """What of a scene the guard depends on: the robot and what is welded to the world."""
    fixed = tuple(o for o in scene.objects if o.fixed)
    return scene.robot, scene.table, fixed, scene.fixtures


def guard_for(scene: Scene, margin: float = DEFAULT_MARGIN_M) -> CollisionGuard:
    """The guard of a scene's fixed geometry, shared by scenes that differ only in what moves
    (a perturbed object's pose or mass builds no new model)."""
    key = (_static_key(scene), float(margin))
    guard = _guards.get(key)
    if guard is None:
        guard = CollisionGuard(get_robot(scene.robot), scene, margin)
        _guards[key] = guard
        if len(_guards) > _CACHE_SIZE:
            _guards.popitem(last=False)
    else:
        _guards.move_to_end(key)
    return guard


__all__ = ["CollisionGuard", "Clearance", "CLEAR", "DEFAULT_MARGIN_M", "SLOW_SHARE", "guard_for"]
