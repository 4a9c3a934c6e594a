"""FollowJointTrajectory and GripperCommand goals as ros2_control's joint_trajectory_controller and
gripper_action_controller carry them out, without ROS: a goal's checks turned into the result's
error codes, its tolerances, its feedback and its outcome. A goal commands the robot through the
Driver, so it meets the same checks as a topic command; nodes/actions.py serves goals as actions.

Threads: start() and cancel() run on the caller's (the ROS executor's), update() on the control
loop's after each state tick; a goal's state is guarded by its own lock and `done` is set once.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from r2s2r.contract.types import CommandError, JointNamesError, JointSample, StaleCommandError
from r2s2r.hardware.driver import Driver

# control_msgs/action/FollowJointTrajectory result codes.
SUCCESSFUL, INVALID_GOAL, INVALID_JOINTS, OLD_HEADER_TIMESTAMP = 0, -1, -2, -3
PATH_TOLERANCE_VIOLATED, GOAL_TOLERANCE_VIOLATED = -4, -5

SUCCEEDED, ABORTED, CANCELED = "succeeded", "aborted", "canceled"  # how a goal ends (action_msgs/GoalStatus)

PREEMPTED_BY_GOAL = "Current goal cancelled due to new incoming action."  # joint_trajectory_controller's words

# Whether the joints have stopped is judged on their velocity averaged over this long: velocity
# readings chatter at rest (franky-sim's joint 7: +-0.08 rad/s, moving 8e-5 rad).
STOPPED_WINDOW_S = 0.05


@dataclass(frozen=True)
class Outcome:
    status: str  # SUCCEEDED, ABORTED or CANCELED
    error_code: int = SUCCESSFUL
    error_string: str = ""


@dataclass(frozen=True)
class JointTolerance:
    """One joint's tolerance; 0 leaves that quantity unchecked."""

    position: float = 0.0
    velocity: float = 0.0
    acceleration: float = 0.0


@dataclass(frozen=True)
class ToleranceDefaults:
    """The controller's own tolerances, joint_trajectory_controller's `constraints` parameters:
    `trajectory` and `goal` position tolerances by joint name (constraints.<joint>.trajectory and
    .goal), `goal_time` (constraints.goal_time: how late the goal may be reached; 0 waits as long
    as it takes) and `stopped_velocity` (constraints.stopped_velocity_tolerance: how slowly the
    joints must move for the goal to count as reached)."""

    trajectory: dict[str, float] = field(default_factory=dict)
    goal: dict[str, float] = field(default_factory=dict)
    goal_time: float = 0.0
    stopped_velocity: float = 0.01


@dataclass(frozen=True)
class Tolerances:
    joints: tuple[str, ...]
    path: tuple[JointTolerance, ...]
    goal: tuple[JointTolerance, ...]
    goal_time: float


class GoalRejected(Exception):
    def __init__(self, error_code: int, error_string: str):
        super().__init__(error_string)
        self.error_code = error_code


def tolerances_for(joints: Sequence[str], defaults: ToleranceDefaults, path=(), goal=(),
                   goal_time: float = 0.0) -> Tolerances:
    """The tolerances a goal runs with: the defaults, changed by the goal's own `path` and `goal`
    entries ((name, position, velocity, acceleration) each) and `goal_time`, by the controller's
    rule: a value above 0 replaces the default, 0 keeps it, -1 turns the check off; any other
    negative value, or a joint the group does not have, rejects the goal."""
    joints = tuple(joints)
    base_path = [JointTolerance(position=defaults.trajectory.get(j, 0.0)) for j in joints]
    base_goal = [JointTolerance(position=defaults.goal.get(j, 0.0), velocity=defaults.stopped_velocity)
                 for j in joints]
    for label, entries, table in (("path_tolerance", path, base_path), ("goal_tolerance", goal, base_goal)):
        for name, *values in entries:
            if name not in joints:
                raise GoalRejected(INVALID_JOINTS, f"{label} names joint {name!r}; expected joints of the group: "
                                                   f"{', '.join(joints)}")
            i = joints.index(name)
            merged = []
            for quantity, value, default in zip(("position", "velocity", "acceleration"), values,
                                                (table[i].position, table[i].velocity, table[i].acceleration)):
                if not np.isfinite(value) or (value < 0 and value != -1):
                    raise GoalRejected(INVALID_GOAL, f"{label} of {name}: {quantity} {value}; expected a positive "
                                                     "tolerance, 0 (the controller's default) or -1 (not checked)")
                merged.append(value if value > 0 else (0.0 if value == -1 else default))
            table[i] = JointTolerance(*merged)
    if not np.isfinite(goal_time) or goal_time < 0:
        raise GoalRejected(INVALID_GOAL, f"goal_time_tolerance {goal_time} s; expected 0 (the controller's default) "
                                         "or a positive time")
    return Tolerances(joints, tuple(base_path), tuple(base_goal), goal_time if goal_time > 0 else defaults.goal_time)


def _violation(tolerances: Sequence[JointTolerance], joints, position_error, velocity_error) -> str:
    """The first tolerance `position_error` / `velocity_error` (per joint) break, in words, or ""."""
    for i, tol in enumerate(tolerances):
        for quantity, tolerance, error, unit in (("position", tol.position, position_error[i], "rad"),
                                                 ("velocity", tol.velocity, velocity_error[i], "rad/s")):
            if tolerance > 0 and np.isfinite(error) and abs(error) > tolerance:
                return f"{joints[i]} {quantity} error {error:+.4f} {unit} beyond the tolerance {tolerance:g} {unit}"
    return ""


@dataclass(frozen=True)
class Feedback:
    """desired, actual and their difference (desired - actual), positions and velocities in the
    group's joint order, at robot time `stamp`."""

    stamp: float
    joints: tuple[str, ...]
    desired: tuple[np.ndarray, np.ndarray]
    actual: tuple[np.ndarray, np.ndarray]
    error: tuple[np.ndarray, np.ndarray]


class _Goal:
    """What both kinds of goal share: the outcome, set once, and a wake-up for whoever waits."""

    def __init__(self, driver: Driver):
        self.driver = driver
        self._lock = threading.Lock()
        self._changed = threading.Event()  # a new feedback or the outcome
        self.outcome: Outcome | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def wait(self, timeout: float) -> bool:
        """Until there is news (feedback or the outcome) or `timeout` passes; whether there was."""
        news = self._changed.wait(timeout)
        self._changed.clear()
        return news

    def _finish(self, outcome: Outcome) -> Outcome:
        """Set the outcome unless one is set already (call with the lock held); the one that stands."""
        if self.outcome is None:
            self.outcome = outcome
            self._changed.set()
        return self.outcome

    def _replaced(self, what_replaced: str) -> Outcome:
        """The outcome when something else took the command over: another command preempts the goal
        (cancelled, as the controllers do); the driver stopping the motion aborts it."""
        if what_replaced == f"a command on {self.source}":  # the next goal of this action
            return Outcome(CANCELED, INVALID_GOAL, PREEMPTED_BY_GOAL)
        if what_replaced.startswith("a command on"):
            return Outcome(CANCELED, INVALID_GOAL, f"preempted by {what_replaced}")
        return Outcome(ABORTED, INVALID_GOAL, f"stopped by {what_replaced}")


class TrajectoryGoal(_Goal):
    """One FollowJointTrajectory goal on one joint group, from its checks to its result.

    start() hands the trajectory to the driver (any order of joint names, a subset holding the
    others, a start stamp of 0 for now or a time on the robot clock); update() compares the state
    with the trajectory after every state tick: a path tolerance broken before the last point's
    time aborts (PATH_TOLERANCE_VIOLATED), the goal tolerances met at or after it succeed, and not
    meeting them within goal_time after it aborts (GOAL_TOLERANCE_VIOLATED); an aborted goal
    brakes the group to a stop and holds. cancel() does the same and ends CANCELED."""

    def __init__(self, driver: Driver, group: str, source: str):
        super().__init__(driver)
        self.group = group
        self.source = source  # the action's name, for messages and what a replaced command is told
        self.joints = driver.robot.group(group).joints
        self.feedback: Feedback | None = None
        self._sampler = None
        self._tolerances: Tolerances | None = None
        self._sequence = -1
        self._recent: collections.deque = collections.deque()  # (time, positions) over STOPPED_WINDOW_S

    def start(self, names: Sequence[str], stamp: float, times, positions, velocities, accelerations,
              tolerances: ToleranceDefaults, path=(), goal=(), goal_time: float = 0.0,
              multi_dof_points: int = 0) -> Outcome | None:
        """Check and command the goal; its outcome when it ends here (refused), else None."""
        try:
            if multi_dof_points:
                raise GoalRejected(INVALID_GOAL, f"{self.source}: multi_dof_trajectory has {multi_dof_points} "
                                                 "points; expected none (this controller moves joints only)")
            self._tolerances = tolerances_for(self.joints, tolerances, path, goal, goal_time)
            with self.driver.lock:
                self._sampler = self.driver.command_trajectory(self.group, names, stamp, times, positions,
                                                               velocities, accelerations, what=self.source)
                self._sequence = self.driver.loop.controller.group_command(self.group)[0]
        except GoalRejected as error:
            return self._end_now(Outcome(ABORTED, error.error_code, str(error)))
        except JointNamesError as error:
            return self._end_now(Outcome(ABORTED, INVALID_JOINTS, str(error)))
        except StaleCommandError as error:
            return self._end_now(Outcome(ABORTED, OLD_HEADER_TIMESTAMP, str(error)))
        except CommandError as error:
            return self._end_now(Outcome(ABORTED, INVALID_GOAL, str(error)))
        return None

    def _end_now(self, outcome: Outcome) -> Outcome:
        with self._lock:
            return self._finish(outcome)

    def update(self, now: float, sample: JointSample) -> None:
        """After a state tick: the feedback, and the outcome if the goal ended."""
        with self._lock:
            if self.done or self._sampler is None:
                return
            loop = self.driver.loop
            sequence, what_replaced = loop.controller.group_command(self.group)
            if sequence != self._sequence:
                self._finish(self._replaced(what_replaced))
                return
            desired = self._sampler.sample(now)
            actual = (sample.positions_of(self.joints), sample.velocities_of(self.joints))
            error = (desired[0] - actual[0], desired[1] - actual[1])
            self.feedback = Feedback(now, self.joints, desired, actual, error)
            self._changed.set()
            if now < self._sampler.start_time:
                return  # a start in the future: holding until then, nothing to check yet
            tol = self._tolerances
            if now < self._sampler.end_time:
                broken = _violation(tol.path, self.joints, *error)
                if broken:
                    self._abort(PATH_TOLERANCE_VIOLATED, f"path tolerance broken at t={now:.3f} s: {broken}")
                return
            broken = _violation(tol.goal, self.joints, error[0], desired[1] - self._mean_velocity(now, actual))
            if not broken:
                self._finish(Outcome(SUCCEEDED, SUCCESSFUL, "goal reached"))
            elif tol.goal_time > 0 and now - self._sampler.end_time > tol.goal_time:
                self._abort(GOAL_TOLERANCE_VIOLATED, f"goal not reached {tol.goal_time:g} s (goal_time_tolerance) "
                                                     f"after the trajectory's end: {broken}")

    def _mean_velocity(self, now: float, actual) -> np.ndarray:
        """The joints' velocity averaged over the last STOPPED_WINDOW_S (the measured one until
        that much has been seen)."""
        recent = self._recent
        recent.append((now, actual[0]))
        while len(recent) > 2 and now - recent[1][0] >= STOPPED_WINDOW_S:
            recent.popleft()
        then, before = recent[0]
        if now - then < STOPPED_WINDOW_S:
            return actual[1]
        return (actual[0] - before) / (now - then)

    def _abort(self, code: int, text: str) -> None:
        """End ABORTED and hold: the group brakes to a stop (call with the lock held)."""
        self._finish(Outcome(ABORTED, code, text))
        self.driver.loop.controller.brake_group(self.group, f"{self.source} aborting")

    def cancel(self) -> Outcome:
        """The client cancelled: brake the group to a stop and hold (unless it has ended already)."""
        with self._lock:
            if self.done:
                return self.outcome
            self._finish(Outcome(CANCELED, SUCCESSFUL, "cancelled: braking to a stop and holding"))
            if self.driver.loop is not None:
                self.driver.loop.controller.brake_group(self.group, f"{self.source} cancelled")
            return self.outcome

    def preempt(self) -> None:
        """A new goal for the same group takes over (it commands the group itself)."""
        with self._lock:
            self._finish(Outcome(CANCELED, INVALID_GOAL, PREEMPTED_BY_GOAL))

    def lost(self, why: str) -> None:
        """The driver cannot carry the goal on (the link is down): abort, saying why."""
        with self._lock:
            self._finish(Outcome(ABORTED, INVALID_GOAL, f"{self.source}: {why}"))


@dataclass(frozen=True)
class GripperSettings:
    """gripper_action_controller's parameters: `goal_tolerance` (m) counts as reached; a gripper that
    has moved less than `stall_velocity_threshold` (m/s) on average over `stall_timeout` (s) has
    stalled (on an object, or blocked), which ends the goal: succeeded if `allow_stalling`, else
    aborted."""

    goal_tolerance: float = 0.01
    stall_velocity_threshold: float = 0.001
    stall_timeout: float = 1.0
    allow_stalling: bool = False


@dataclass(frozen=True)
class GripperState:
    position: float  # the opening (m): the sum of the finger joints
    effort: float
    stalled: bool = False
    reached_goal: bool = False


class GripperGoal(_Goal):
    """One GripperCommand goal: the opening `position` (m) commanded through the driver and closed
    with at most `max_effort` N (0: the backend's configured force), ended when the measured
    opening is within the goal tolerance (succeeded, reached_goal) or the fingers stall. How each
    backend bounds the force is in docs/ros.md."""

    def __init__(self, driver: Driver, gripper: str, source: str, settings: GripperSettings):
        super().__init__(driver)
        self.gripper = gripper
        self.source = source
        self.settings = settings
        spec = next((g for g in driver.robot.grippers if g.name == gripper), None)
        self.fingers = spec.joints if spec is not None else ()
        self.state: GripperState | None = None
        self.rejection = ""  # why the driver refused the goal
        self._goal = float("nan")
        self._sequence = -1
        self._anchor: tuple[float, float] | None = None  # (time, opening) of the last movement

    def start(self, position: float, max_effort: float = 0.0) -> Outcome | None:
        try:
            with self.driver.lock:
                self.driver.command_gripper(self.gripper, [position], what=self.source, max_effort=max_effort)
                self._sequence = self.driver.loop.controller.gripper_sequence[self.gripper]
        except CommandError as error:
            self.rejection = str(error)
            with self._lock:
                return self._finish(Outcome(ABORTED, INVALID_GOAL, self.rejection))
        self._goal = float(position)
        return None

    def update(self, now: float, sample: JointSample) -> None:
        with self._lock:
            if self.done or self._sequence < 0:
                return
            controller = self.driver.loop.controller
            if controller.gripper_sequence[self.gripper] != self._sequence:
                self._finish(Outcome(CANCELED, INVALID_GOAL, "preempted by another command to the gripper"))
                return
            measured = self.measure(sample)
            opening, s = measured.position, self.settings
            if abs(opening - self._goal) < s.goal_tolerance:
                self.state = GripperState(opening, measured.effort, stalled=False, reached_goal=True)
                self._finish(Outcome(SUCCEEDED))
                return
            if self._anchor is None or abs(opening - self._anchor[1]) > s.stall_velocity_threshold * s.stall_timeout:
                self._anchor = (now, opening)
            stalled = now - self._anchor[0] > s.stall_timeout
            self.state = GripperState(opening, measured.effort, stalled=stalled, reached_goal=False)
            self._changed.set()
            if stalled:
                self._finish(Outcome(SUCCEEDED if s.allow_stalling else ABORTED))

    def measure(self, sample: JointSample) -> GripperState:
        """The opening (the sum of the finger joints) and the grip in `sample`: the fingers' mean
        effort (each finger pushes with the grip force), NaN where the backend measures none."""
        efforts = sample.efforts_of(self.fingers)
        efforts = efforts[np.isfinite(efforts)]
        return GripperState(float(sample.positions_of(self.fingers).sum()),
                            float(efforts.mean()) if efforts.size else float("nan"))

    def cancel(self) -> Outcome:
        """Cancelled: the fingers stay where they are measured."""
        with self._lock:
            if self.done:
                return self.outcome
            self._finish(Outcome(CANCELED))
        if self.state is not None and self.driver.loop is not None:
            with self.driver.lock:
                self.driver.loop.controller.hold_grippers(self._openings_holding(self.state.position))
        return self.outcome

    def _openings_holding(self, opening: float) -> np.ndarray:
        """Every gripper's target as it is, this one's at `opening`."""
        controller = self.driver.loop.controller
        openings = controller.gripper_openings()
        openings[list(controller.grippers).index(self.gripper)] = opening
        return openings

    def preempt(self) -> None:
        with self._lock:
            self._finish(Outcome(CANCELED, INVALID_GOAL, "preempted by a new goal"))

    def lost(self, why: str) -> None:
        with self._lock:
            self._finish(Outcome(ABORTED, INVALID_GOAL, f"{self.source}: {why}"))
