"""The last stage before any backend, sim included: whatever the controller asks for, the
setpoints that reach the hardware stay within the joint position, velocity and acceleration
limits and never step further than one cycle allows.

Commands are validated where they enter (hardware.validation, via JointController: NaN, Inf,
wrong length, unknown joints, out-of-limit targets are rejected there); the watchdog and the
latched estop act on the controller (brake to a stop within the limits, then hold). This filter
is the backstop under all of that: in normal operation its input is feasible and it passes it
through unchanged; when it is not (a jump, a lag, a target beyond a limit) the filter closes on
it along a braking profile and comes to rest on it, and it counts every intervention by reason
for `diagnostics`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from r2s2r.hardware.kernels import SAFETY_REASONS, safety_step
from r2s2r.hardware.motion import stopping_point
from r2s2r.robots import RobotSpec


@dataclass(frozen=True)
class SafetyLimits:
    """What the filter enforces, by default the RobotSpec's datasheet limits."""

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    watchdog_s: float = 0.5  # streaming targets older than this: brake and hold (0 disables)
    # Braking toward a position limit, rad/s^2 (at most `acceleration`; None: `acceleration`).
    limit_deceleration: np.ndarray | None = None

    @property
    def braking(self) -> np.ndarray:
        """The deceleration the filter brakes with ahead of a position limit."""
        if self.limit_deceleration is None:
            return self.acceleration
        return np.minimum(self.limit_deceleration, self.acceleration)

    @classmethod
    def of(cls, robot: RobotSpec, velocity_scale: float = 1.0, watchdog_s: float = 0.5) -> "SafetyLimits":
        if not 0.0 < velocity_scale <= 1.0:
            raise ValueError(f"velocity_scale is {velocity_scale}; expected a number in (0, 1]")
        if watchdog_s < 0:
            raise ValueError(f"watchdog_s is {watchdog_s}; expected 0 (off) or a positive number of seconds")
        limits = robot.limits
        return cls(limits.lower.copy(), limits.upper.copy(), limits.velocity * velocity_scale,
                   limits.acceleration.copy(), watchdog_s)


class SafetyFilter:
    """Keeps a stream of setpoints (one per cycle of length `dt`) within the limits.

    Feasible setpoints pass through unchanged; an infeasible one is approached along a braking
    profile (kernels.safety_step), so the output always comes to rest on a setpoint at rest.
    `position` is exactly what it last wrote and `velocity` the speed of that last step."""

    def __init__(self, limits: SafetyLimits, dt: float, position: np.ndarray):
        self.limits = limits
        self.dt = dt
        self.position = np.array(position, dtype=float)
        self.velocity = np.zeros_like(self.position)
        self.last_input = self.position.copy()  # the previous (clamped) setpoint: its speed is the target's
        self.interventions: Counter = Counter()
        self.step_counts = np.zeros(len(SAFETY_REASONS), dtype=np.int64)
        self.bounds = tuple(np.array(a, dtype=float) for a in (limits.lower, limits.upper, limits.velocity,
                                                                limits.acceleration, limits.braking))
        self.last_reason = ""
        self.intervened = False  # whether the last call changed its setpoint

    def reset(self, position: np.ndarray) -> None:
        """Start again from a measured position at rest (after connect, reset, reconnect)."""
        self.position[:] = np.clip(position, self.bounds[0], self.bounds[1])
        self.velocity[:] = 0.0
        self.last_input[:] = self.position

    def stopping_point(self) -> np.ndarray:
        """Where braking at the acceleration limits from the current output stops, within the limits."""
        lower, upper, _, acceleration, _ = self.bounds
        return stopping_point(self.position, self.velocity, acceleration, lower, upper)

    def _count(self, reason: str, n: int = 1) -> None:
        self.interventions[reason] += n
        self.last_reason = reason

    def __call__(self, setpoint: np.ndarray) -> np.ndarray:
        setpoint = np.asarray(setpoint, dtype=float)
        replaced = setpoint.shape != self.position.shape or not np.isfinite(setpoint).all()
        if replaced:
            self._count("non_finite_setpoint")
            setpoint = self.stopping_point()  # brake to a stop: the kernel lands on it
            self.last_input[:] = setpoint
        self.step_counts[:] = 0
        changed = safety_step(self.position, self.velocity, self.last_input, np.ascontiguousarray(setpoint),
                              self.dt, *self.bounds, self.step_counts)
        self.intervened = changed or replaced
        self.add_counts(self.step_counts)
        return self.position.copy()

    def add_counts(self, counts: np.ndarray) -> None:
        """Count what the compiled filter did (kernels.SAFETY_REASONS order)."""
        if counts.any():
            for reason, n in zip(SAFETY_REASONS, counts):
                if n:
                    self._count(reason, int(n))

    def report(self) -> dict[str, int]:
        return dict(self.interventions)
