"""Physical validation of a scene before it is used: does the twin behave like a cell at all?

Checks, per object (an object that fails says which check on which object):

- `penetration`: at the start no object overlaps another object, the support or the robot by
  more than `PENETRATION_M`;
- `settle`: left alone for `SETTLE_S` with the arm holding its home pose, no object moves more
  than `SETTLE_MOVE_M` or turns more than `SETTLE_TURN_RAD`, nor falls below the support;
- `supported`: after settling, every object rests on something (the support, a fixture or
  another object), not on nothing;
- `grasp` (objects the gripper can take: narrower than its opening, light enough): a top grasp
  lifted by `LIFT_M` holds the object (it rises with the hand);
- `release`: put back down and let go, the object stays down where it was put (it does not
  stick to the fingers, topple or roll away).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np

from r2s2r.contract.types import CommandError
from r2s2r.hardware.driver import Driver, send_script_command
from r2s2r.hardware.sim import SimHardware
from r2s2r.real2sim.params import OBJECT_PRIORITY
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin

PENETRATION_M = 0.003
SETTLE_S = 0.5
SETTLE_MOVE_M = 0.005
SETTLE_TURN_RAD = math.radians(5)
LIFT_M = 0.05
GRASP_FOLLOW_M = 0.02  # a held object rises at least LIFT_M less this
RELEASE_MOVE_M = 0.01


@dataclass(frozen=True)
class CheckResult:
    check: str
    object: str
    passed: bool
    detail: str


@dataclass
class Validation:
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def message(self) -> str:
        bad = self.failures()
        if not bad:
            return "all checks passed"
        return "; ".join(f"{r.check} failed on {r.object}: {r.detail}" for r in bad)

    def report(self) -> list[dict]:
        return [{"check": r.check, "object": r.object, "passed": r.passed, "detail": r.detail} for r in self.results]


class SceneInvalid(ValueError):
    """A scene failed validation; the message names each failed check and object."""


def _twin(scene: Scene) -> Twin:
    twin = Twin(scene)
    for obj in scene.objects:
        twin.model.geom_priority[twin.model.geom(obj.name).id] = OBJECT_PRIORITY
    return twin


def validate(scene: Scene, grasp: bool = True) -> Validation:
    """Run the checks (see the module docstring) on a fresh twin of `scene`."""
    v = Validation()
    twin = _twin(scene)
    movable = [o for o in scene.objects if not o.fixed]
    # Penetration at the start.
    mujoco.mj_forward(twin.model, twin.data)
    for obj in scene.objects:
        worst, other = 0.0, ""
        for c in twin.contacts():
            if obj.name in (c.geom1, c.geom2) and -c.distance > worst:
                worst, other = -c.distance, c.geom2 if c.geom1 == obj.name else c.geom1
        v.results.append(CheckResult("penetration", obj.name, worst <= PENETRATION_M,
                                     f"overlaps {other} by {worst * 1000:.1f} mm" if worst > PENETRATION_M
                                     else f"deepest overlap {worst * 1000:.1f} mm"))
    # Settle with the arm holding home.
    start = twin.object_poses()
    driver = Driver(SimHardware.from_twin(twin, reset=False))  # the scene as placed, the arm holding home
    driver.start()
    driver.step(twin.time + SETTLE_S)
    after = twin.object_poses()
    support_z = scene.table.height if scene.table is not None else 0.0
    for obj in movable:
        p0, q0 = start[obj.name]
        p1, q1 = after[obj.name]
        moved = float(np.linalg.norm(p1 - p0))
        turned = 2 * math.acos(min(1.0, abs(float(np.dot(q0, q1)))))
        fell = p1[2] < support_z - 0.01
        ok = moved <= SETTLE_MOVE_M and turned <= SETTLE_TURN_RAD and not fell
        v.results.append(CheckResult("settle", obj.name, ok, f"moved {moved * 1000:.1f} mm, turned "
                                     f"{math.degrees(turned):.1f} deg" + (", fell below the support" if fell else "")))
        touching = [c for c in twin.contacts() if obj.name in (c.geom1, c.geom2) and c.normal_force > 1e-6]
        v.results.append(CheckResult("supported", obj.name, bool(touching) and not fell,
                                     "rests on " + ", ".join(sorted({c.geom2 if c.geom1 == obj.name else c.geom1
                                                                     for c in touching})) if touching
                                     else "touches nothing: it is floating or falling"))
    if grasp and twin.robot.grippers:
        settled = twin.snapshot()
        for obj in movable:
            twin.restore(settled)
            _grasp_checks(scene, twin, driver, obj, v)
    return v


def _graspable(obj, gripper) -> float | None:
    """The width across the fingers of a top grasp, if the gripper can take it."""
    if obj.shape == "box":
        width = min(obj.size[0], obj.size[1])
    elif obj.shape in ("cylinder", "capsule", "sphere"):
        width = 2 * obj.size[0]
    else:
        return None
    return width if width < gripper.opening_range[1] - 0.01 and obj.mass < 1.0 else None


def _grasp_checks(scene, twin, driver: Driver, obj, v: Validation) -> None:
    from r2s2r.real2sim.proxy import grasp_lift_script
    from r2s2r.skills.stages import yaw_of
    gripper = twin.robot.grippers[0]
    width = _graspable(obj, gripper)
    if width is None:
        v.results.append(CheckResult("grasp", obj.name, True, "not graspable by the gripper: not checked"))
        return
    pos, quat = twin.object_poses()[obj.name]
    yaw = yaw_of(quat)
    if obj.shape == "box" and obj.size[0] < obj.size[1]:
        yaw += math.pi / 2
    top = pos[2] + obj.half_height
    grasp_z = max(pos[2], top - 0.03)  # fingers reach 3 cm down at most
    q0 = driver.loop.positions()
    driver.hold_here()
    cmds, duration = grasp_lift_script(twin.robot, q0, pos, yaw, width, 0.006, lift=LIFT_M, grasp_height=grasp_z,
                                       release_dwell_s=0.3)
    t0 = twin.time
    rest = pos.copy()
    lifted_by = None
    i = 0
    # The lift ends when the hand starts back down: the second gripper command is the release.
    release_time = [c.time for c in cmds if c.kind == "gripper"][-1]
    lift_end = release_time - 0.05 - 0.5  # the hand has held the lift, before lowering
    while twin.time < t0 + duration:
        now = twin.time - t0
        while i < len(cmds) and cmds[i].time <= now + 1e-9:
            c = cmds[i]
            i += 1
            try:
                send_script_command(driver, c)
            except CommandError as error:  # the collision check refused the way to the object
                v.results.append(CheckResult("grasp", obj.name, False, f"the command path refused the grasp: {error}"))
                return
        driver.loop.cycle()
        if lifted_by is None and now >= lift_end - 0.5:
            lifted_by = float(twin.object_poses()[obj.name][0][2] - rest[2])
    final = twin.object_poses()[obj.name][0]
    held = lifted_by is not None and lifted_by >= LIFT_M - GRASP_FOLLOW_M
    v.results.append(CheckResult("grasp", obj.name, held, f"rose {1000 * (lifted_by or 0):.0f} mm of a "
                                 f"{1000 * LIFT_M:.0f} mm lift"))
    moved = float(np.linalg.norm(final[:2] - rest[:2]))
    down = abs(final[2] - rest[2]) < 0.01
    v.results.append(CheckResult("release", obj.name, held and down and moved <= RELEASE_MOVE_M,
                                 f"ended {moved * 1000:.0f} mm from where it was taken, "
                                 f"{(final[2] - rest[2]) * 1000:+.0f} mm in height" if held else
                                 "not checked: the grasp did not hold"))


__all__ = ["validate", "Validation", "CheckResult", "SceneInvalid"]
