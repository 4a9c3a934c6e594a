"""The last stage before any backend, sim included: whatever the controller asks for, the
setpoints that reach the hardware stay within the joint position, velocity and acceleration
limits and never step further than one cycle allows.

Commands are validated where they enter (hardware.validation, via JointController: NaN, Inf,
wrong length, unknown joints, out-of-limit targets are rejected there); the watchdog and the
latched estop act on the controller (brake to a stop within the limits, then hold). This filter
is the backstop under all of that; in normal operation it does nothing, and every time it does
something it counts the reason for `diagnostics`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from r2s2r.hardware.kernels import SAFETY_REASONS, safety_step
from r2s2r.robots import RobotSpec


@dataclass(frozen=True)
class SafetyLimits:
    """What the filter enforces, by default the RobotSpec's datasheet limits."""

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    watchdog_s: float = 0.5  # streaming targets older than this: brake and hold (0 disables)

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
    """Clamps a stream of setpoints (one per cycle of length `dt`) into the limits."""

    def __init__(self, limits: SafetyLimits, dt: float, position: np.ndarray):
        self.limits = limits
        self.dt = dt
        self.position = np.array(position, dtype=float)
        self.velocity = np.zeros_like(self.position)
        self.interventions: Counter = Counter()
        self.step_counts = np.zeros(len(SAFETY_REASONS), dtype=np.int64)
        self.bounds = tuple(np.ascontiguousarray(a, dtype=float)
                             for a in (limits.lower, limits.upper, limits.velocity, limits.acceleration))
        self.last_reason = ""

    def reset(self, position: np.ndarray) -> None:
        """Start again from a measured position at rest (after connect, reset, reconnect)."""
        self.position[:] = position
        self.velocity[:] = 0.0

    def _count(self, reason: str, n: int = 1) -> None:
        self.interventions[reason] += n
        self.last_reason = reason

    def __call__(self, setpoint: np.ndarray) -> np.ndarray:
        setpoint = np.asarray(setpoint, dtype=float)
        if setpoint.shape != self.position.shape or not np.isfinite(setpoint).all():
            self._count("non_finite_setpoint")
            setpoint = self.position + self.velocity * self.dt  # keep going as we were, then brake below
        self.step_counts[:] = 0
        safety_step(self.position, self.velocity, np.ascontiguousarray(setpoint), self.dt, *self.bounds,
                    self.step_counts)
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
