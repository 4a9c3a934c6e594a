"""Stage-level experts: a policy that runs a list of stages (approach, grasp, lift, move, place,
release, verify, ...), each a TCP motion or a gripper action planned from what it observes.

A stage is planned once, when it begins, from the observation then (object poses included):
a Cartesian motion from where the TCP was last commanded to a goal, with minimum-jerk timing.
Every `act()` samples the running motions at the chunk's times and solves IK for each sample,
seeded from the previous one (a few damped-least-squares iterations each). A stage ends when
its motion has run and the arm has settled on it (or a little later, whatever the arm does),
when its gripper time has passed, or at once for a verify stage, which may send the expert
back to an earlier stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import mujoco
import numpy as np

from r2s2r.policy.types import ActionChunk, Observation, PolicyError, PolicyMetadata
from r2s2r.skills.ik import ArmIK, mat_to_quat, quat_to_mat, rotation_error

SETTLE_M, SETTLE_RAD = 0.004, 0.04  # a TCP this near its goal has arrived
SETTLE_TIMEOUT_S = 1.0  # how long past a motion's end a stage waits for the arm to arrive
GOAL_IK_ITERATIONS = 60  # a stage's goal is solved once, from afar: enough to converge


@dataclass(frozen=True)
class Pose:
    """A TCP pose: position (m) and rotation matrix, world frame."""

    pos: np.ndarray
    rot: np.ndarray

    def moved(self, dx: float = 0.0, dy: float = 0.0, dz: float = 0.0) -> "Pose":
        return Pose(self.pos + np.array([dx, dy, dz]), self.rot)


def top_down(yaw: float) -> np.ndarray:
    """A TCP pointing straight down (z = -world z), its x axis at `yaw` about the vertical;
    a parallel gripper's fingers close along its y axis."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def yaw_of(quat) -> float:
    """Rotation about the vertical of a wxyz quaternion (its x axis projected on the floor)."""
    rot = quat_to_mat(quat)
    return math.atan2(rot[1, 0], rot[0, 0])


def min_jerk(s: float) -> float:
    s = min(max(s, 0.0), 1.0)
    return s * s * s * (10.0 - 15.0 * s + 6.0 * s * s)


def slerp(q0: np.ndarray, q1: np.ndarray, s: float) -> np.ndarray:
    if float(np.dot(q0, q1)) < 0.0:
        q1 = -q1
    delta = np.empty(3)
    mujoco.mju_subQuat(delta, q1, q0)  # the rotation vector from q0 to q1 (in q0's frame)
    out = q0.copy()
    mujoco.mju_quatIntegrate(out, delta, s)
    return out


PathFn = Callable[[float], Pose]  # s in [0, 1] -> pose


def line(start: Pose, goal: Pose) -> PathFn:
    q0, q1 = mat_to_quat(start.rot), mat_to_quat(goal.rot)

    def at(s: float) -> Pose:
        return Pose(start.pos + s * (goal.pos - start.pos), quat_to_mat(slerp(q0, q1, s)))
    return at


def line_duration(start: Pose, goal: Pose, speed: float, turn_speed: float = 1.2, minimum: float = 0.3) -> float:
    """Seconds for a min-jerk line at `speed` m/s and `turn_speed` rad/s on average."""
    angle = float(np.linalg.norm(rotation_error(goal.rot, start.rot)))
    return max(float(np.linalg.norm(goal.pos - start.pos)) / speed, angle / turn_speed, minimum)


@dataclass
class Motion:
    path: PathFn
    t0: float
    duration: float

    def at(self, t: float) -> Pose:
        return self.path(min_jerk((t - self.t0) / self.duration) if self.duration > 0 else 1.0)

    @property
    def t_end(self) -> float:
        return self.t0 + self.duration


@dataclass
class Arm:
    """One arm's commanded state: the TCP pose and joints last commanded, its running motion."""

    group: str
    gripper: str | None
    ik: ArmIK
    q: np.ndarray  # the last IK solution (the seed of the next)
    pose: Pose  # where the TCP was last commanded
    opening: float  # gripper target
    motion: Motion | None = None
    goal: Pose | None = None  # where the running motion ends


class Stage:
    """Base class: plan in begin(), say when the stage is over in finished()."""

    name = "stage"

    def begin(self, expert: "StageExpert", obs: Observation) -> None:
        pass

    def finished(self, expert: "StageExpert", obs: Observation) -> bool:
        return True

    def next_stage(self, expert: "StageExpert", obs: Observation) -> str | None:
        """The stage to go to instead of the next in the list (a verify stage's retry)."""
        return None


GoalFn = Callable[["StageExpert", Observation], Pose]


class Move(Stage):
    """Move arms' TCPs along straight lines to goals planned from the observation, optionally
    setting their grippers as they start."""

    def __init__(self, name: str, goals: dict[str, GoalFn], grippers: dict[str, float | Callable] | None = None,
                 speed: float | None = None):
        self.name = name
        self.goals = goals
        self.grippers = grippers or {}
        self.speed = speed

    def begin(self, expert, obs):
        for group, opening in self.grippers.items():
            expert.arms[group].opening = opening(expert, obs) if callable(opening) else opening
        for group, goal_fn in self.goals.items():
            arm = expert.arms[group]
            goal = goal_fn(expert, obs)
            expert.plan(arm, line(arm.pose, goal), line_duration(arm.pose, goal, self.speed or expert.speed), goal,
                        obs.stamp)

    def finished(self, expert, obs):
        return all(expert.arrived(expert.arms[g], obs) for g in self.goals)


PathPlan = Callable[["StageExpert", Observation, Pose], tuple[PathFn, float]]


class Follow(Move):
    """Move one arm's TCP along a curve (a door's arc): `plan(expert, obs, start)` gives the
    path from the pose the TCP was last commanded to, and its duration."""

    def __init__(self, name: str, group: str, plan: PathPlan):
        super().__init__(name, {group: None})
        self.group = group
        self.plan_path = plan

    def begin(self, expert, obs):
        arm = expert.arms[self.group]
        path, duration = self.plan_path(expert, obs, arm.pose)
        expert.plan(arm, path, duration, path(1.0), obs.stamp)


class Grip(Stage):
    """Set grippers' openings and wait `duration` seconds, the arms holding still."""

    def __init__(self, name: str, openings: dict[str, float | Callable], duration: float):
        self.name = name
        self.openings = openings
        self.duration = duration
        self._t0 = 0.0

    def begin(self, expert, obs):
        self._t0 = obs.stamp
        for group, opening in self.openings.items():
            expert.arms[group].opening = opening(expert, obs) if callable(opening) else opening

    def finished(self, expert, obs):
        return obs.stamp - self._t0 >= self.duration - 1e-9


class Verify(Stage):
    """Check a condition on the observation; when it fails, go back to `retry` (at most
    `retries` times), then to `give_up`."""

    def __init__(self, name: str, check: Callable[["StageExpert", Observation], bool], retry: str | None = None,
                 retries: int = 0, give_up: str | None = None):
        self.name = name
        self.check = check
        self.retry = retry
        self.retries = retries if retry is not None else 0
        self.give_up = give_up

    def next_stage(self, expert, obs):
        if self.check(expert, obs):
            return None
        used = expert.retries.get(self.name, 0)
        if used < self.retries:
            expert.retries[self.name] = used + 1
            return self.retry
        return self.give_up


class Hold(Stage):
    """A last stage: hold where the TCP was last commanded."""

    def __init__(self, name: str = "done"):
        self.name = name

    def finished(self, expert, obs):
        return False


@dataclass
class StageLog:
    """Which stages ran, when, and which goals were out of reach (for debugging and reports)."""

    entries: list = field(default_factory=list)  # (time, stage)
    unreachable: list = field(default_factory=list)  # (time, stage, group, position error m)


class StageExpert:
    """A Policy running `stages` in order on `arms` (joint group -> its gripper, or None).

    `speed` is the default average TCP speed of a Move, m/s. Groups of the robot not in `arms`
    hold where they are observed."""

    def __init__(self, metadata: PolicyMetadata, robot, arms: dict[str, str | None], stages: list[Stage],
                 speed: float = 0.25):
        self.metadata = metadata
        self.robot = robot
        self.stages = stages
        self.speed = speed
        self._by_name = {s.name: i for i, s in enumerate(stages)}
        if len(self._by_name) != len(stages):
            raise ValueError("stage names must be unique")
        self._iks = {group: ArmIK(robot, group) for group in arms}
        self._grippers = arms
        self.reset()

    def reset(self) -> None:
        self.arms: dict[str, Arm] = {}
        self.index = -1
        self.retries: dict[str, int] = {}
        self.memory: dict = {}  # what stages note for later ones (where the object was grasped ...)
        self.log = StageLog()

    @property
    def stage(self) -> str:
        return self.stages[self.index].name if self.index >= 0 else ""

    # -- what stages call -------------------------------------------------------------------------
    def plan(self, arm: Arm, path: PathFn, duration: float, goal: Pose, t0: float) -> None:
        # Solved once from afar, only to know (and log) whether the goal is within reach.
        result = arm.ik.solve(goal.pos, goal.rot, arm.q, iterations=GOAL_IK_ITERATIONS)
        if not result.reached(position_tol=0.01, rotation_tol=0.1):
            self.log.unreachable.append((t0, self.stage, arm.group, result.position_error))
        arm.goal = goal
        arm.motion = Motion(path, t0, duration)

    def arrived(self, arm: Arm, obs: Observation) -> bool:
        if arm.motion is None:
            return True
        if obs.stamp < arm.motion.t_end - 1e-9:
            return False
        if obs.stamp >= arm.motion.t_end + SETTLE_TIMEOUT_S:
            return True
        pos, rot = arm.ik.fk(obs.joints[arm.group])
        return bool(np.linalg.norm(pos - arm.goal.pos) < SETTLE_M
                    and np.linalg.norm(rotation_error(arm.goal.rot, rot)) < SETTLE_RAD)

    def object(self, obs: Observation, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in obs.objects:
            raise PolicyError(f"scripted expert: the observation has no pose of {name!r} (privileged object "
                              f"poses: {', '.join(obs.objects) or 'none'}); the runner fills Observation.objects "
                              "from Task.object_poses")
        pos, quat = obs.objects[name]
        return np.asarray(pos, float), np.asarray(quat, float)

    def tcp(self, group: str, obs: Observation) -> Pose:
        pos, rot = self._iks[group].fk(obs.joints[group])
        return Pose(pos, rot)

    # -- the policy ---------------------------------------------------------------------------------
    def _start(self, obs: Observation) -> None:
        for group, gripper in self._grippers.items():
            q = np.asarray(obs.joints[group], float).copy()
            ik = self._iks[group]
            pos, rot = ik.fk(q)
            opening = float(obs.grippers[gripper]) if gripper is not None else 0.0
            self.arms[group] = Arm(group, gripper, ik, q, Pose(pos, rot), opening)
        self._enter(0, obs)

    def _enter(self, index: int, obs: Observation) -> None:
        self.index = index
        self.log.entries.append((obs.stamp, self.stages[index].name))
        self.stages[index].begin(self, obs)

    def _advance(self, obs: Observation) -> None:
        for _ in range(len(self.stages)):  # a verify stage may chain into the next at once
            stage = self.stages[self.index]
            if not stage.finished(self, obs):
                return
            for arm in self.arms.values():  # the motion is over: hold its end
                if arm.motion is not None and obs.stamp >= arm.motion.t_end:
                    arm.pose = arm.motion.at(arm.motion.t_end)
                    arm.motion = None
            target = stage.next_stage(self, obs)
            if target is None:
                if self.index + 1 >= len(self.stages):
                    return
                self._enter(self.index + 1, obs)
            else:
                self._enter(self._by_name[target], obs)

    def act(self, observation: Observation) -> ActionChunk:
        if self.index < 0:
            self._start(observation)
        self._advance(observation)
        md = self.metadata
        times = observation.stamp + md.dt * np.arange(md.chunk_length)
        joints, grippers = {}, {}
        for group, arm in self.arms.items():
            rows = np.empty((len(times), len(arm.q)))
            seed = arm.q
            for i, t in enumerate(times):
                pose = arm.motion.at(t) if arm.motion is not None else arm.pose
                seed = arm.ik.solve(pose.pos, pose.rot, seed).q
                rows[i] = seed
                if i == min(1, len(times) - 1):
                    arm.q = seed  # where the next chunk starts from
            joints[group] = rows
            if arm.gripper is not None:
                grippers[arm.gripper] = np.full(len(times), arm.opening)
        for group in md.action.joints:
            if group not in joints:  # an arm the expert does not use holds still
                joints[group] = np.repeat(np.asarray(observation.joints[group], float)[None], len(times), 0)
        for gripper in md.action.grippers:
            grippers.setdefault(gripper, np.full(len(times), float(observation.grippers[gripper])))
        return ActionChunk(observation.stamp, md.dt, joints, grippers)


__all__ = ["Pose", "Stage", "Move", "Follow", "Grip", "Verify", "Hold", "StageExpert", "top_down", "yaw_of", "line",
           "line_duration", "min_jerk", "slerp"]
