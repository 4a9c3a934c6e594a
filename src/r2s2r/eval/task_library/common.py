"""What every manipulation task tracks, cheaply, once per policy tick: who touches what,
how hard the robot hits its surroundings, when an object is grasped, lifted, released or lost.

Contacts are read in bulk from MjData (body ids per contact pair as numpy arrays); a contact
force is computed only for the rare contact between the robot and its surroundings.
"""

from __future__ import annotations

import abc

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np

from r2s2r.config import Section

LIFT_M = 0.02  # an object risen this far above where it started while grasped was lifted
CLEARANCE_CAP_M = 0.05  # finger clearance counts toward a margin up to this much
PINCH_COS = 0.7  # a finger's contact normal within 45 deg of the closing axis pinches


def tcp_site_of(robot, gripper: str) -> str:
    """The TCP site of the arm a gripper sits on: `gripper` -> `arm_tcp`, `left_gripper` -> `left_arm_tcp`."""
    group = gripper.replace("gripper", "arm")
    if group not in robot.group_names:
        raise ValueError(f"robot {robot.name}: gripper {gripper} has no joint group {group} to pair with")
    return f"{group}_tcp"


class SceneIndex:
    """Body ids of a twin's robot, fingers, surroundings and objects, for masked contact lookups."""

    def __init__(self, twin, pushable: tuple[str, ...] = ()):
        m = twin.model
        scene = twin.scene
        objects = {m.body(o.name).id for o in scene.objects}
        fixture_roots = {m.body(f.name).id for f in scene.fixtures}
        table = m.body("table").id if scene.table is not None else -1
        fixtures = {b for b in range(1, m.nbody) if m.body_rootid[b] in fixture_roots}
        self.is_robot = np.zeros(m.nbody, bool)
        for b in range(1, m.nbody):
            self.is_robot[b] = b not in objects and b not in fixtures and b != table
        # What the robot must not hit: the table and fixtures, except parts meant to be pushed.
        self.is_surrounding = np.zeros(m.nbody, bool)
        for b in fixtures | ({table} if table >= 0 else set()):
            self.is_surrounding[b] = True
        for name in pushable:
            self.is_surrounding[m.body(name).id] = False
        self.grippers = tuple(g.name for g in twin.robot.grippers)
        self.fingers = {g.name: np.array([m.jnt_bodyid[m.joint(j).id] for j in g.joints]) for g in twin.robot.grippers}
        self.finger_geoms = {g: np.flatnonzero(np.isin(m.geom_bodyid, bodies)) for g, bodies in self.fingers.items()}
        self.tcp_sites = {g: m.site(tcp_site_of(twin.robot, g)).id for g in self.grippers}
        # The fingers close along their (prismatic) joints' axis.
        self.finger_joint = {g.name: m.joint(g.joints[0]).id for g in twin.robot.grippers}
        self.gripper_index = {g.name: i for i, g in enumerate(twin.robot.grippers)}
        # Which arm each robot body belongs to (the group of the nearest joint at or above it),
        # so two arms touching each other counts as a collision.
        group_of_joint = {m.joint(j).id: gi for gi, grp in enumerate(twin.robot.groups) for j in grp.joints}
        self.arm_of = np.full(m.nbody, -1)
        for b in range(1, m.nbody):
            if not self.is_robot[b]:
                continue
            body = b
            while body > 0:
                joints = [j for j in range(m.body_jntadr[body], m.body_jntadr[body] + m.body_jntnum[body])
                          if j in group_of_joint] if m.body_jntnum[body] else []
                if joints:
                    self.arm_of[b] = group_of_joint[joints[0]]
                    break
                body = m.body_parentid[body]


@dataclass
class Contacts:
    """This cycle's contacts as body-id pairs, with their normals (from body1 toward body2)."""

    body1: np.ndarray
    body2: np.ndarray
    normal: np.ndarray

    @classmethod
    def read(cls, twin) -> "Contacts":
        d = twin.data
        n = d.ncon
        if n == 0:
            empty = np.zeros(0, int)
            return cls(empty, empty, np.zeros((0, 3)))
        bodies = twin.model.geom_bodyid[d.contact.geom[:n]]
        return cls(bodies[:, 0], bodies[:, 1], d.contact.frame[:n, :3])

    def pinching(self, body: int, fingers: np.ndarray, axis: np.ndarray) -> int:
        """How many of `fingers` touch `body` with a contact normal along `axis` (the gripper's
        closing axis): touching from the side, as a pinch does, not resting on top."""
        pair = ((self.body1 == body) & np.isin(self.body2, fingers)) | \
               ((self.body2 == body) & np.isin(self.body1, fingers))
        if not pair.any():
            return 0
        along = np.abs(self.normal[pair] @ axis) > PINCH_COS
        finger = np.where(self.body1[pair] == body, self.body2[pair], self.body1[pair])
        return len(set(finger[along].tolist()))

    def touching(self, body: int, others: np.ndarray) -> bool:
        return bool((((self.body1 == body) & np.isin(self.body2, others)) |
                     ((self.body2 == body) & np.isin(self.body1, others))).any())


class CollisionTracker:
    """The hardest the robot has pressed on its surroundings or one arm on another: the sum of
    the normal forces of those contacts in one cycle, at most over the trial (N)."""

    def __init__(self, index: SceneIndex):
        self.index = index
        self.max_force = 0.0
        self.worst = ""
        self._force = np.zeros(6)

    def update(self, twin, contacts: Contacts) -> None:
        if contacts.body1.size == 0:
            return
        ix = self.index
        r1, r2 = ix.is_robot[contacts.body1], ix.is_robot[contacts.body2]
        hits = (r1 & ix.is_surrounding[contacts.body2]) | (r2 & ix.is_surrounding[contacts.body1])
        a1, a2 = ix.arm_of[contacts.body1], ix.arm_of[contacts.body2]
        hits |= r1 & r2 & (a1 != a2) & (a1 >= 0) & (a2 >= 0)
        total, strongest, worst = 0.0, 0.0, -1
        for i in np.flatnonzero(hits):
            mujoco.mj_contactForce(twin.model, twin.data, int(i), self._force)
            total += self._force[0]
            if self._force[0] > strongest:
                strongest, worst = self._force[0], int(i)
        if total > self.max_force:
            self.max_force = float(total)
            m = twin.model
            self.worst = f"{m.body(contacts.body1[worst]).name} / {m.body(contacts.body2[worst]).name}"


@dataclass
class Loss:
    """An object leaving a gripper that held it: released (the gripper opened) or slipped."""

    time: float
    gripper: str
    released: bool
    lifted: bool  # it had been lifted by then
    position: np.ndarray


@dataclass
class ObjectTracker:
    """One object's history: rise, nearest approach of each TCP, grasps and losses."""

    index: SceneIndex
    name: str
    body: int
    start: np.ndarray
    max_rise: float = 0.0
    min_tcp_distance: dict = field(default_factory=dict)
    touched: dict = field(default_factory=dict)  # ever touched by a finger
    in_contact: dict = field(default_factory=dict)  # touched by a finger now
    grasped: dict = field(default_factory=dict)  # held by both fingers now
    grasps: dict = field(default_factory=dict)  # how many grasps began
    lifted: dict = field(default_factory=dict)  # the highest rise while held, per gripper
    losses: list = field(default_factory=list)
    _opening_at_grasp: dict = field(default_factory=dict)

    @classmethod
    def of(cls, twin, index: SceneIndex, name: str) -> "ObjectTracker":
        body = twin.model.body(name).id
        tracker = cls(index, name, body, twin.data.xpos[body].copy())
        for g in index.grippers:
            tracker.min_tcp_distance[g] = math.inf
            tracker.touched[g] = tracker.in_contact[g] = tracker.grasped[g] = False
            tracker.grasps[g] = 0
            tracker.lifted[g] = 0.0
        return tracker

    def update(self, twin, contacts: Contacts) -> None:
        d = twin.data
        pos = d.xpos[self.body]
        rise = float(pos[2] - self.start[2])
        self.max_rise = max(self.max_rise, rise)
        openings = twin.gripper_openings
        for g in self.index.grippers:
            site = self.index.tcp_sites[g]
            tcp = d.site_xpos[site]
            self.min_tcp_distance[g] = min(self.min_tcp_distance[g], float(np.linalg.norm(tcp - pos)))
            fingers = self.index.fingers[g]
            self.in_contact[g] = contacts.touching(self.body, fingers)
            self.touched[g] |= self.in_contact[g]
            closing_axis = d.xaxis[self.index.finger_joint[g]]
            held = self.in_contact[g] and contacts.pinching(self.body, fingers, closing_axis) == len(fingers)
            opening = float(openings[self.index.gripper_index[g]])
            if held and not self.grasped[g]:
                self.grasps[g] += 1
                self._opening_at_grasp[g] = opening
            elif not held and self.grasped[g]:
                self.losses.append(Loss(twin.time, g, released=opening > self._opening_at_grasp[g] + 0.002,
                                        lifted=self.lifted[g] >= LIFT_M, position=pos.copy()))
            if held:
                self.lifted[g] = max(self.lifted[g], rise)
            self.grasped[g] = held

    def was_lifted(self, gripper: str | None = None) -> bool:
        grippers = self.index.grippers if gripper is None else (gripper,)
        return any(self.lifted[g] >= LIFT_M for g in grippers)

    def held_by(self) -> list[str]:
        return [g for g in self.index.grippers if self.grasped[g]]


class PlaceAndSettle:
    """step() and done() of a task that ends once its object has rested, touched by nothing, where
    it must be (`_placed`) for `settle_s`, or has fallen off the table. Expects what start() of
    such a task sets: collisions, tracker, limits, table_z; `_settled_since` None at the start."""

    _settled_since: float | None = None

    @abc.abstractmethod  # enforced with TaskLogic's ABCMeta
    def _placed(self, twin) -> bool:
        """The object is where the task needs it (its margin terms all positive)."""

    def step(self, twin) -> None:
        contacts = Contacts.read(twin)
        self.collisions.update(twin, contacts)
        self.tracker.update(twin, contacts)
        if not any(self.tracker.in_contact.values()) and self._placed(twin):
            if self._settled_since is None:
                self._settled_since = twin.time
        else:
            self._settled_since = None

    def done(self, twin) -> bool:
        if self._settled_since is not None and twin.time - self._settled_since >= self.limits["settle_s"]:
            return True
        return bool(twin.data.xpos[self.tracker.body][2] < self.table_z - 0.05)  # fell off the table


def grasp_stage(tracker: ObjectTracker) -> str:
    """The failure stage of a pick: missed_grasp (never pinched between both fingers of a
    gripper), slip_or_drop (held but never lifted, or it last left a gripper that was not
    opening), missed_place (lifted, then let go by an opening gripper where it should not be),
    timeout (still held)."""
    if not any(tracker.grasps.values()):
        return "missed_grasp"
    if tracker.held_by():
        return "timeout"
    if not tracker.was_lifted():
        return "slip_or_drop"  # held, but it slid out as the arm rose
    if tracker.losses:
        return "missed_place" if tracker.losses[-1].released else "slip_or_drop"
    return "timeout"


def finger_clearance(twin, index: SceneIndex, geom: int, cap: float = CLEARANCE_CAP_M) -> float:
    """The smallest distance from any finger of any gripper to `geom` (negative: penetrating), at most `cap`."""
    m, d = twin.model, twin.data
    fromto = np.zeros(6)
    nearest = cap
    for geoms in index.finger_geoms.values():
        for g in geoms:
            nearest = min(nearest, mujoco.mj_geomDistance(m, d, int(g), geom, cap, fromto))
    return float(nearest)


def read_common(params: Section) -> dict[str, float]:
    """Thresholds every manipulation task takes, with their defaults."""
    return {"collision_force": params.number("collision_force", 60.0, positive=True),
            "reach_tolerance": params.number("reach_tolerance", 0.05, positive=True),
            "settle_s": params.number("settle_s", 0.5, minimum=0.0)}


COMMON_KEYS = {"collision_force", "reach_tolerance", "settle_s"}
