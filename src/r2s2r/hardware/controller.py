"""The command side of the identical interface, without ROS: what ros2_control's
forward_command_controller and joint_trajectory_controller do, per joint group.

The driver node feeds it messages (already turned into numpy by the contract); every
cycle `update()` turns the latest accepted commands into one setpoint per joint, passed
through the motion limiter. A rejected command raises CommandError and changes nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from r2s2r.contract.names import Topics
from r2s2r.contract.types import CommandError
from r2s2r.hardware.kernels import follow
from r2s2r.hardware.motion import MotionLimiter, braking_path
from r2s2r.hardware.trajectory import TrajectorySampler
from r2s2r.hardware.validation import (check_finite, check_length, check_within, order_by_names)
from r2s2r.robots import RobotSpec


@dataclass
class _Group:
    name: str
    joints: tuple[str, ...]
    index: np.ndarray  # positions of the group's joints in the robot's joint_names
    target: np.ndarray
    trajectory: TrajectorySampler | None = None
    last_command: float = float("-inf")  # when the last streaming target arrived
    watched: bool = False  # a streaming target the watchdog may still have to stop
    sequence: int = 0  # counts what the group was told to do: a goal watching it sees it replaced
    replaced_by: str = ""  # what told it last (a command on a topic, an estop, a stop short ...)

    def replace(self, cause: str) -> None:
        self.sequence += 1
        self.replaced_by = cause


@dataclass
class CommandStats:
    accepted: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)
    watchdog_stops: int = 0
    stopped_short: int = 0  # motions braked because going on would have brought the robot into contact
    last_stop_short: str = ""
    last_error: str = ""
    last_error_time: float = float("nan")
    last_accepted_time: float = float("nan")  # robot time of the last command taken


class JointController:
    """`watchdog_s`: a streaming group whose last target is older than this brakes to a stop
    within the limits and holds (0 disables; trajectories are exempt: they carry their own timing).
    `velocity` / `acceleration` / `lower` / `upper`: what the motion limiter plans with and commands
    are checked against (default the robot's limits; the safety filter's, so that narrower limits
    are planned for, not clipped after the fact).
    `guard`: the cell's collision model (sim.collision.CollisionGuard): targets and trajectory points
    that would bring the robot into contact are refused, and a motion whose braking path would is
    braked while it can still stop clear (a stop short, counted in `stats`)."""

    def __init__(self, robot: RobotSpec, position: np.ndarray, watchdog_s: float = 0.0,
                 velocity: np.ndarray | None = None, acceleration: np.ndarray | None = None,
                 lower: np.ndarray | None = None, upper: np.ndarray | None = None, guard=None):
        self.robot = robot
        self.watchdog_s = watchdog_s
        self.guard = guard
        limits = robot.limits
        # The range commands are checked against: the robot's, or the narrower one its backend takes.
        self.lower = limits.lower if lower is None else np.array(lower, dtype=float)
        self.upper = limits.upper if upper is None else np.array(upper, dtype=float)
        self.limiter = MotionLimiter(limits.velocity if velocity is None else velocity,
                                     limits.acceleration if acceleration is None else acceleration,
                                     np.clip(position, self.lower, self.upper))
        names = robot.joint_names
        self.groups: dict[str, _Group] = {}
        for g in robot.groups:
            index = np.array([names.index(j) for j in g.joints])
            self.groups[g.name] = _Group(g.name, g.joints, index, np.array(position, float)[index])
        self.grippers = {g.name: g for g in robot.grippers}
        self.gripper_targets = {g.name: (g.opening_range[1] if g.home_opening is None else g.home_opening)
                                for g in robot.grippers}
        self.gripper_sequence = {g.name: 0 for g in robot.grippers}  # as _Group.sequence, per gripper
        # The grip force each gripper closes with (N), NaN for the backend's configured default:
        # a GripperCommand's max_effort sets it, a topic command or a hold goes back to the default.
        self.gripper_forces = {g.name: float("nan") for g in robot.grippers}
        self.stats = CommandStats()
        # The closest approach at the current setpoint: motion may not come closer than this.
        self.clearance = None
        self._fast_clearance = None  # the same at speed, where fingers and hands keep the margins
        self._measure_clearance()
        self.latched = ""  # why commands are refused (a latched estop), empty while they are taken
        self._lock = threading.Lock()  # commands arrive on executor threads, updates on the loop

    # -- commands -------------------------------------------------------------------------------
    def _check_open(self, label: str) -> None:
        if self.latched:
            raise CommandError(f"{label}: dropped, {self.latched}")

    def _reject(self, kind: str, error: CommandError, now: float) -> None:
        self.stats.rejected[kind] += 1
        self.stats.last_error = str(error)
        self.stats.last_error_time = now

    def command_positions(self, group: str, values, now: float = 0.0, streaming: bool = True) -> None:
        """A target for one group, in the group's joint order: `streaming`, one of a stream the
        watchdog stops when it falls silent (a policy's); else held until the next command, as
        forward_command_controller holds it."""
        kind = f"{group}_position"
        label = Topics.streaming_commands(group) if streaming else Topics.position_commands(group)
        try:
            self._check_open(label)
            g = self._group(group)
            values = np.asarray(values, dtype=float).ravel()
            check_length(label, values, g.joints)
            check_finite(label, values)
            check_within(label, values, self.lower[g.index], self.upper[g.index], g.joints)
            self._check_clear(label, g, values[None, :])
        except CommandError as error:
            self._reject(kind, error, now)
            raise
        with self._lock:
            g.trajectory = None  # a streaming target replaces a running trajectory, as in ros2_control
            g.target = values.copy()
            g.last_command = now
            g.watched = streaming
            g.replace(f"a command on {label}")
        self.stats.accepted[kind] += 1
        self.stats.last_accepted_time = now

    def command_trajectory(self, group: str, names, stamp: float, times, positions, velocities,
                           accelerations, now: float, label: str = "") -> TrajectorySampler:
        """A joint_trajectory_controller goal; `stamp` 0 means start now. `names` may be a subset
        of the group's joints: the others hold where they are. `label`: where the goal came from
        (default the group's joint_trajectory topic). The sampler that now drives the group."""
        kind = f"{group}_trajectory"
        label = label or f"{group}_controller/joint_trajectory"
        try:
            self._check_open(label)
            g = self._group(group)
            order = order_by_names(label, names, g.joints, partial=True)
            positions, velocities, accelerations = (
                None if rows is None else np.asarray(rows, float) for rows in (positions, velocities, accelerations))
            times = np.asarray(times, float).ravel()
            for field_name, rows in (("positions", positions), ("velocities", velocities),
                                     ("accelerations", accelerations)):
                if rows is not None and (rows.ndim != 2 or rows.shape != (times.size, len(names))):
                    raise CommandError(f"{label}: {field_name} of shape {rows.shape}; expected one row per point "
                                       f"({times.size}) of one value per joint name ({len(names)})")
            if times.size == 0:
                raise CommandError(f"{label}: no points; expected at least one")
            for field_name, values in (("positions", positions), ("velocities", velocities),
                                       ("accelerations", accelerations)):
                if values is not None:
                    check_finite(f"{label} {field_name}", values)
            with self._lock:
                held = self.limiter.position[g.index].copy()
            positions = self._complete(positions, order, held)
            velocities = None if velocities is None else self._complete(velocities, order, 0.0)
            accelerations = None if accelerations is None else self._complete(accelerations, order, 0.0)
            check_finite(f"{label} time_from_start", times)
            for i, row in enumerate(positions):
                check_within(f"{label} point {i}", row, self.lower[g.index], self.upper[g.index], g.joints)
            self._check_clear(label, g, positions)
            with self._lock:
                current = self.limiter.position[g.index].copy()
                current_velocity = self.limiter.velocity[g.index].copy()
            try:
                sampler = TrajectorySampler(stamp if stamp != 0 else now, times, positions, velocities,
                                            accelerations, current, current_velocity)
            except ValueError as exc:
                raise CommandError(f"{label}: {exc}") from None
        except CommandError as error:
            self._reject(kind, error, now)
            raise
        with self._lock:
            g.trajectory = sampler
            g.target = sampler.final_positions.copy()
            g.watched = False
            g.replace(f"a command on {label}")
        self.stats.accepted[kind] += 1
        self.stats.last_accepted_time = now
        return sampler

    @staticmethod
    def _complete(rows: np.ndarray, order: np.ndarray, fill) -> np.ndarray:
        """Rows in the group's joint order from rows in a message's order; joints the message left
        out (order -1) take `fill` (their held position, or 0 for a rate)."""
        out = np.empty((rows.shape[0], order.size))
        out[:] = fill
        given = order >= 0
        out[:, given] = rows[:, order[given]]
        return out

    def command_gripper(self, gripper: str, values, now: float = 0.0, max_effort: float = 0.0,
                        label: str = "") -> None:
        """An opening (m) for `gripper`, closed with at most `max_effort` N (0: the backend's
        default force; more than the gripper's max_force is held to it)."""
        label = label or f"{gripper}_controller/commands"
        try:
            self._check_open(label)
            if gripper not in self.grippers:
                raise CommandError(f"{label}: robot {self.robot.name} has no gripper {gripper!r}")
            values = np.asarray(values, dtype=float).ravel()
            if values.shape != (1,):
                raise CommandError(f"{label}: got {values.size} values, expected 1 (the opening in metres)")
            check_finite(label, values)
            lo, hi = self.grippers[gripper].opening_range
            check_within(label, values, np.array([lo]), np.array([hi]), (gripper,), unit="m")
            if not np.isfinite(max_effort) or max_effort < 0:
                raise CommandError(f"{label}: max_effort {max_effort} is not a force; expected 0 (the "
                                   f"gripper's default force) or up to {self.grippers[gripper].max_force:g} N")
            with self._lock:
                self._check_fingers_clear(label, gripper, float(values[0]))
                self.gripper_targets[gripper] = float(values[0])
                self.gripper_forces[gripper] = (min(float(max_effort), self.grippers[gripper].max_force)
                                                if max_effort > 0 else float("nan"))
                self.gripper_sequence[gripper] += 1
                self._measure_clearance()  # the fingers move: what the arm's motion is compared with
        except CommandError as error:
            self._reject(gripper, error, now)
            raise
        self.stats.accepted[gripper] += 1
        self.stats.last_accepted_time = now

    def _check_fingers_clear(self, label: str, gripper: str, opening: float) -> None:
        """Refuse an opening that moves the fingers into contact with the cell or the robot (the
        other hand of a bimanual robot) at the arm's setpoint. Call with the lock held."""
        if self.guard is None:
            return
        openings = self._openings()
        changed = openings.copy()
        changed[list(self.grippers).index(gripper)] = opening
        error = self.guard.opening_error(label, self.limiter.position, openings, changed)
        if error:
            raise CommandError(error)

    def _openings(self) -> np.ndarray:
        return np.array([self.gripper_targets[g] for g in self.grippers])

    def _measure_clearance(self) -> None:
        if self.guard is not None:
            self.clearance = self.guard.clearance(self.limiter.position, self._openings())
            self._fast_clearance = None  # measured when the arm next goes fast

    def _check_clear(self, label: str, g: _Group, rows: np.ndarray) -> None:
        """Refuse targets (rows of the group's joints, the other groups at their targets) that would
        bring the robot into contact with the cell or itself."""
        if self.guard is None:
            return
        with self._lock:
            pose = np.empty_like(self.limiter.position)
            for other in self.groups.values():
                pose[other.index] = other.target
            openings, reference = self._openings(), self.clearance
        for i, row in enumerate(rows):
            pose[g.index] = row
            where = label if len(rows) == 1 else f"{label} point {i}"
            error = self.guard.target_error(where, pose, openings, reference)
            if error:
                raise CommandError(error)

    def _group(self, group: str) -> _Group:
        if group not in self.groups:
            raise CommandError(f"robot {self.robot.name} has no joint group {group!r}; "
                               f"groups: {', '.join(self.groups)}")
        return self.groups[group]

    # -- the control cycle -------------------------------------------------------------------------
    def hold(self, position: np.ndarray | None = None) -> None:
        """Drop every command and hold `position` at rest (a measured position, clipped into the
        limits, after a reset or a reconnect: the arm is known to stand still there), or, without
        one, the current setpoint."""
        with self._lock:
            if position is not None:
                self.limiter.reset(np.clip(position, self.lower, self.upper))
            for g in self.groups.values():
                g.trajectory = None
                g.watched = False
                g.target = self.limiter.position[g.index].copy()
                g.replace("a hold where the arm stands (reset, reconnect or teleport)")
            self._measure_clearance()

    def brake(self, cause: str = "a brake") -> None:
        """Drop every command and stop as fast as the acceleration limits allow (estop, disable);
        `cause` is what a goal that was running is told."""
        with self._lock:
            self._brake(cause)

    def _brake(self, cause: str) -> None:
        stop = self._stopping_point()
        for g in self.groups.values():
            g.trajectory = None
            g.watched = False
            g.target = stop[g.index]
            g.replace(cause)

    def brake_group(self, group: str, cause: str) -> None:
        """Stop one group within the acceleration limits and hold where it stops (a cancelled or
        aborted goal); the other groups go on."""
        with self._lock:
            g = self._group(group)
            stop = self._stopping_point()
            g.trajectory = None
            g.watched = False
            g.target = stop[g.index]
            g.replace(cause)

    def latch(self, reason: str) -> None:
        """Brake to a stop and refuse every command, saying `reason`, until unlatch() (estop)."""
        self.latched = reason
        self.brake(f"an estop: {reason}")

    def unlatch(self) -> None:
        """Take commands again; the arm holds where its braking stops (never a jump to elsewhere)."""
        self.brake("an enable")
        self.latched = ""

    def _stopping_point(self) -> np.ndarray:
        return self.limiter.stopping_point(self.lower, self.upper)

    def update(self, now: float, dt: float) -> np.ndarray:
        """Setpoints of every joint (robot joint order) for the cycle that starts at `now`."""
        with self._lock:
            target = np.empty_like(self.limiter.position)
            target_velocity = np.zeros_like(target)
            stop = None
            for g in self.groups.values():
                if g.watched and self.watchdog_s > 0 and now - g.last_command > self.watchdog_s:
                    stop = self._stopping_point() if stop is None else stop
                    g.target = stop[g.index]
                    g.watched = False
                    g.replace(f"the watchdog: no target for {self.watchdog_s:g} s")
                    self.stats.watchdog_stops += 1
                if g.trajectory is not None:
                    pos, vel = g.trajectory.sample(now + dt)
                    target[g.index], target_velocity[g.index] = pos, vel
                    if g.trajectory.done(now + dt):
                        g.trajectory = None
                else:
                    target[g.index] = g.target
            if self.guard is None:
                return self.limiter.step(target, dt, target_velocity).copy()
            before = self.limiter.position.copy(), self.limiter.velocity.copy()
            self.limiter.step(target, dt, target_velocity)
            if not self._path_clear():
                # Going on would bring the robot into contact: brake from where it was, along the
                # path the previous cycle found clear.
                self.limiter.position[:], self.limiter.velocity[:] = before
                self._brake(f"a stop short: {self.stats.last_stop_short}")
                zero = np.zeros_like(target)
                for g in self.groups.values():
                    target[g.index] = g.target
                self.limiter.step(target, dt, zero)
            return self.limiter.position.copy()

    def _path_clear(self) -> bool:
        """Whether the setpoint just planned, and braking from it, stay clear; counts a stop short
        when they do not."""
        lim = self.limiter
        blocked = self.motion_blocked(np.empty((0, lim.position.size)), np.abs(lim.velocity))
        if blocked is not None:
            self.stats.stopped_short += 1
            self.stats.last_stop_short = f"going on would have put {blocked.describe()}"
            return False
        return True

    def motion_blocked(self, through: np.ndarray, speed: np.ndarray):
        """What stops a motion that went through `through` (rows, robot joint order) at up to `speed`
        per joint to the limiter's setpoint, and brakes from there, or None when it may go on: then
        the clearance the arm is held to moves on to the setpoint. Call with locked() held."""
        lim = self.limiter
        if lim.velocity.any():
            brake = braking_path(lim.position, lim.velocity, lim.max_acceleration, self.lower, self.upper)
        else:
            brake = lim.position[None, :]
        poses = np.vstack([brake[:1], through, brake[1:]])  # the setpoint first: its clearance is kept
        slow = self.guard.slow(speed, lim.max_velocity)
        last, worst = self.guard.check_path(poses, self._openings(), slow)
        if slow:
            reference = self.clearance
        else:  # at speed the fingers keep the margins: where they are within one, no closer than they are
            reference = last if self._fast_clearance is None else self._fast_clearance
            if reference.distance < 0:  # touching (allowed slowly): out of contact only slowly, no slack
                reference = self.clearance
        if self.guard.blocks(worst, reference):
            return worst
        # At speed `last` is measured with the stricter rule: no clearer than the slow one there.
        self.clearance = self.guard.clearer(self.clearance, last)
        self._fast_clearance = None if slow else self.guard.clearer(reference, last)
        return None

    def follow(self, safety) -> None:
        """Plan on from what the safety filter wrote where it changed the limiter's setpoint."""
        with self._lock:
            follow(self.limiter.position, self.limiter.velocity, safety.position, safety.velocity,
                   safety.last_input)

    def locked(self) -> threading.Lock:
        """The lock that guards the limiter's state (for code that steps it directly)."""
        return self._lock

    def steady_span(self, now: float, dt: float, n: int) -> np.ndarray | None:
        """How update() will run for the next `n` cycles from `now` if no command arrives: when
        every group holds one constant target (no trajectory running, no watchdog stop due before
        the last of them), that target (robot joint order), so the cycles can run in one go
        (ControlLoop.run_cycles); otherwise None."""
        with self._lock:
            target = np.empty_like(self.limiter.position)
            for g in self.groups.values():
                if g.trajectory is not None:
                    return None
                # One cycle of margin: the cycle that crosses the deadline runs through update().
                if g.watched and self.watchdog_s > 0 and now + (n + 1) * dt - g.last_command > self.watchdog_s:
                    return None
                target[g.index] = g.target
            return target

    def hold_grippers(self, openings) -> None:
        """Keep each gripper where it is measured (finite values only), e.g. when a real robot
        connects: a gripper is not opened or closed until someone asks."""
        with self._lock:
            for name, value in zip(self.grippers, openings):
                if np.isfinite(value):
                    lo, hi = self.grippers[name].opening_range
                    self.gripper_targets[name] = float(np.clip(value, lo, hi))
                    self.gripper_forces[name] = float("nan")
            self._measure_clearance()

    def gripper_openings(self) -> np.ndarray:
        with self._lock:
            return np.array([self.gripper_targets[g] for g in self.grippers])

    def gripper_force_limits(self) -> np.ndarray:
        """Each gripper's grip force limit (N), NaN where the backend's default applies."""
        with self._lock:
            return np.array([self.gripper_forces[g] for g in self.grippers])

    def group_command(self, group: str) -> tuple[int, str]:
        """(sequence, what told the group last): a goal compares the sequence with its own."""
        with self._lock:
            g = self._group(group)
            return g.sequence, g.replaced_by

    def reference(self, group: str, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A group's reference (what it is told to be at `now`: its trajectory's sample, or its
        target at rest) and output (the limited setpoint sent on), as positions and velocities."""
        with self._lock:
            g = self._group(group)
            if g.trajectory is not None:
                position, velocity = g.trajectory.sample(now)
            else:
                position, velocity = g.target.copy(), np.zeros(len(g.joints))
            return position, velocity, self.limiter.position[g.index].copy(), self.limiter.velocity[g.index].copy()

    def active_trajectories(self) -> list[str]:
        return [g.name for g in self.groups.values() if g.trajectory is not None]
