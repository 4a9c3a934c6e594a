"""One control cycle, the same in the driver node and in the in-process evaluation engine:
read the hardware, turn the accepted commands into setpoints, pass them through the safety
filter, write them, and (for the twin) advance the physics.
"""

from __future__ import annotations

import numpy as np

from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware.base import Hardware
from r2s2r.hardware.controller import JointController
from r2s2r.hardware.kernels import SAFETY_REASONS, track
from r2s2r.hardware.motion import PATH_STEP_RAD
from r2s2r.hardware.safety import SafetyFilter, SafetyLimits
from r2s2r.sim.collision import DEFAULT_MARGIN_M, guard_for
from r2s2r.sim.scene import Scene


class ControlLoop:
    """`cell`: the cell the collision check models (sim.collision), by default the twin's own scene
    or, on a real arm, the robot on its default table; `collision_margin` (m): how close the robot
    may come to the cell and to itself."""

    def __init__(self, hardware: Hardware, control_rate_hz: float | None = None,
                 limits: SafetyLimits | None = None, cell: Scene | None = None,
                 collision_margin: float = DEFAULT_MARGIN_M):
        self.hardware = hardware
        self.robot = hardware.robot
        self.rate_hz = control_rate_hz or self.robot.control_rate_hz
        self.dt = 1.0 / self.rate_hz
        self.simulated = hardware.simulated
        if self.simulated:
            # The twin steps a whole number of physics steps per control cycle.
            self.steps_per_cycle = max(1, int(round(self.dt / hardware.timestep)))
            self.dt = self.steps_per_cycle * hardware.timestep
        self.limits = hardware.command_limits(limits or SafetyLimits.of(self.robot))
        self.last_sample: JointSample = hardware.read()
        position = self.last_sample.positions_of(self.robot.joint_names)
        self.cell = cell or getattr(hardware, "scene", None) or Scene(robot=self.robot.name)
        self.guard = guard_for(self.cell, collision_margin)
        self.controller = JointController(self.robot, position, watchdog_s=self.limits.watchdog_s,
                                          velocity=self.limits.velocity, acceleration=self.limits.acceleration,
                                          lower=self.limits.lower, upper=self.limits.upper, guard=self.guard)
        self.safety = SafetyFilter(self.limits, self.dt, position)
        if not self.simulated:  # the twin starts open at home; a real gripper stays as it is
            self.controller.hold_grippers(self.measured_openings())
        self.cycles = 0

    def hold_here(self) -> None:
        """Drop every command and hold the measured position, starting afresh from rest there.
        Only where the arm is known to stand still: after connect, a reconnect, a fault reset, or a
        twin reset or teleport. A moving arm is stopped with estop() or enable(), which brake."""
        self.last_sample = self.hardware.read()
        position = self.last_sample.positions_of(self.robot.joint_names)
        self.controller.hold(position)
        self.safety.reset(position)
        self.controller.hold_grippers(self.measured_openings())

    def estop(self, reason: str = "estop is latched (clear it with ~/enable)") -> None:
        """Latch a stop: brake to a stop within the acceleration limits and hold there; every
        command until enable() raises CommandError naming `reason`."""
        self.controller.latch(reason)

    def enable(self) -> None:
        """Clear a latched stop and take commands again, holding where the braking stops: the
        setpoints never lose speed faster than the acceleration limits nor aim beyond a limit."""
        self.controller.unlatch()

    @property
    def estopped(self) -> bool:
        return bool(self.controller.latched)

    def measured_openings(self) -> np.ndarray:
        """Each gripper's opening as the sum of its finger joints (NaN where not measured)."""
        sample = self.last_sample
        return np.array([sample.positions_of(g.joints).sum() for g in self.robot.grippers])

    def cycle(self) -> None:
        now = self.hardware.now
        if not self.simulated:
            self.last_sample = self.hardware.read()  # raises LinkLost when the robot is gone
        setpoints = self.safety(self.controller.update(now, self.dt))
        if self.safety.intervened:
            self.controller.follow(self.safety)
        self.hardware.write(JointCommand(self.robot.joint_names, setpoints, stamp=now),
                            self.controller.gripper_openings(), self.controller.gripper_force_limits())
        if self.simulated:
            self.hardware.advance(self.steps_per_cycle)
        self.cycles += 1

    def run_cycles(self, n: int) -> None:
        """`n` cycles with no command arriving in between. On the twin, while the controller holds
        a constant target, they run in one go: the compiled limiter and safety filter produce
        every setpoint, then the physics steps through them (the same setpoints, physics and
        counts as `n` calls of cycle(), without the interpreter's overhead on every cycle)."""
        if not self.simulated or n < 2:
            for _ in range(n):
                self.cycle()
            return
        target = self.controller.steady_span(self.hardware.now, self.dt, n)
        if target is None:
            for _ in range(n):
                self.cycle()
            return
        limiter, safety = self.controller.limiter, self.safety
        setpoints = np.empty((n, target.size))
        counts = np.zeros(len(SAFETY_REASONS), dtype=np.int64)
        with self.controller.locked():
            before = [a.copy() for a in (limiter.position, limiter.velocity, safety.position, safety.velocity,
                                         safety.last_input)]
            track(n, target, self.dt, limiter.position, limiter.velocity, limiter.max_velocity,
                  limiter.max_acceleration, safety.position, safety.velocity, safety.last_input, *safety.bounds,
                  counts, setpoints)
            if not self._span_clear(setpoints):
                # The span would come too close to the cell: run it cycle by cycle, which stops short.
                for state, saved in zip((limiter.position, limiter.velocity, safety.position, safety.velocity,
                                         safety.last_input), before):
                    state[:] = saved
                counts = None
        if counts is None:
            for _ in range(n):
                self.cycle()
            return
        safety.add_counts(counts)
        self.hardware.advance_through(setpoints, self.controller.gripper_openings(), self.steps_per_cycle,
                                      self.controller.gripper_force_limits())
        self.cycles += n

    def _span_clear(self, setpoints: np.ndarray) -> bool:
        """Whether a span of setpoints, and braking from its last one, stays clear
        (JointController.motion_blocked, on rows at most PATH_STEP_RAD apart on every joint)."""
        controller = self.controller
        if not setpoints.size or (not np.ptp(setpoints, axis=0).any() and not controller.limiter.velocity.any()):
            return True
        steps = np.abs(np.diff(setpoints, axis=0))
        travelled = np.concatenate([[0.0], np.cumsum(steps.max(axis=1))])
        picked = np.unique(np.searchsorted(travelled, np.arange(0.0, travelled[-1], PATH_STEP_RAD)))
        speed = np.maximum(steps.max(axis=0, initial=0.0) / self.dt, np.abs(controller.limiter.velocity))
        return controller.motion_blocked(setpoints[picked], speed) is None

    def cycles_until(self, time: float) -> int:
        """How many cycles from now until the hardware clock reaches `time`."""
        remaining = time - self.hardware.now - 1e-9
        return max(0, int(np.ceil(remaining / self.dt - 1e-6))) if remaining > 0 else 0

    def run_until(self, time: float) -> int:
        """Cycle until the hardware clock reaches `time` (sim: as fast as the CPU allows)."""
        n = self.cycles_until(time) if self.simulated else 0
        self.run_cycles(n)
        while self.hardware.now + 1e-9 < time:  # what rounding left, and real hardware
            self.cycle()
            n += 1
        return n

    def sample(self) -> JointSample:
        """The latest joint state: read now from the twin, the last cycle's read on real hardware."""
        if self.simulated:
            self.last_sample = self.hardware.read()
        return self.last_sample

    def positions(self) -> np.ndarray:
        return self.sample().positions_of(self.robot.joint_names)
