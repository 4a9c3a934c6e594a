"""Time-parameterised trajectory following, as ros2_control's joint_trajectory_controller does it.

Segments are interpolated by what each point carries: positions only -> linear, positions and
velocities -> cubic Hermite, positions, velocities and accelerations -> quintic. The first
segment starts from the state the joints were in when the trajectory arrived; after the last
point the joints hold its positions.
"""

from __future__ import annotations

import numpy as np


def _hermite_cubic(p0, v0, p1, v1, T, t):
    s = t / T
    h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
    pos = h00 * p0 + h10 * T * v0 + h01 * p1 + h11 * T * v1
    d00, d10, d01, d11 = 6 * s**2 - 6 * s, 3 * s**2 - 4 * s + 1, -6 * s**2 + 6 * s, 3 * s**2 - 2 * s
    vel = (d00 * p0 + d10 * T * v0 + d01 * p1 + d11 * T * v1) / T
    return pos, vel


def _quintic(p0, v0, a0, p1, v1, a1, T, t):
    # Coefficients of the quintic matching position, velocity and acceleration at both ends.
    c0, c1, c2 = p0, v0, a0 / 2
    T2, T3, T4, T5 = T**2, T**3, T**4, T**5
    c3 = (20 * (p1 - p0) - (8 * v1 + 12 * v0) * T - (3 * a0 - a1) * T2) / (2 * T3)
    c4 = (30 * (p0 - p1) + (14 * v1 + 16 * v0) * T + (3 * a0 - 2 * a1) * T2) / (2 * T4)
    c5 = (12 * (p1 - p0) - 6 * (v1 + v0) * T - (a0 - a1) * T2) / (2 * T5)
    pos = c0 + c1 * t + c2 * t**2 + c3 * t**3 + c4 * t**4 + c5 * t**5
    vel = c1 + 2 * c2 * t + 3 * c3 * t**2 + 4 * c4 * t**3 + 5 * c5 * t**4
    return pos, vel


class TrajectorySampler:
    """A trajectory anchored at `start_time` (seconds on the robot clock), in the group's joint order."""

    def __init__(self, start_time: float, times: np.ndarray, positions: np.ndarray,
                 velocities: np.ndarray | None, accelerations: np.ndarray | None,
                 current_position: np.ndarray, current_velocity: np.ndarray):
        steps = np.diff(times)
        if np.any(steps <= 0):
            k = int(np.argmax(steps <= 0))
            raise ValueError(f"time_from_start must increase strictly from point to point: point {k + 1} is at "
                             f"{times[k + 1]:.6g} s after point {k} at {times[k]:.6g} s; expected a later time")
        if times[0] < 0:
            raise ValueError(f"time_from_start must not be negative: {times[0]:.6g} s; expected 0 or more")
        self.start_time = float(start_time)
        n = positions.shape[1]
        zeros = np.zeros_like(positions)
        self.mode = "quintic" if accelerations is not None and velocities is not None else (
            "cubic" if velocities is not None else "linear")
        # The state at receipt becomes point zero, at t = 0.
        self.times = np.concatenate([[0.0], times]) if times[0] > 0 else np.asarray(times, float)
        prepend = times[0] > 0
        def with_start(first, rows):
            return np.vstack([first[None, :], rows]) if prepend else rows
        self.positions = with_start(np.asarray(current_position, float), positions)
        self.velocities = with_start(np.asarray(current_velocity, float) if self.mode != "linear" else np.zeros(n),
                                     velocities if velocities is not None else zeros)
        self.accelerations = with_start(np.zeros(n), accelerations if accelerations is not None else zeros)

    @property
    def end_time(self) -> float:
        return self.start_time + float(self.times[-1])

    @property
    def final_positions(self) -> np.ndarray:
        return self.positions[-1]

    def done(self, now: float) -> bool:
        return now >= self.end_time

    def sample(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """(position, velocity) at time `now`."""
        t = now - self.start_time
        if t <= self.times[0]:
            return self.positions[0].copy(), np.zeros_like(self.positions[0]) if t < self.times[0] else self.velocities[0].copy()
        if t >= self.times[-1]:
            return self.positions[-1].copy(), np.zeros_like(self.positions[-1])
        k = int(np.searchsorted(self.times, t, side="right") - 1)
        T = self.times[k + 1] - self.times[k]
        tau = t - self.times[k]
        p0, p1 = self.positions[k], self.positions[k + 1]
        if self.mode == "linear":
            return p0 + (p1 - p0) * (tau / T), (p1 - p0) / T
        v0, v1 = self.velocities[k], self.velocities[k + 1]
        if self.mode == "cubic":
            return _hermite_cubic(p0, v0, p1, v1, T, tau)
        return _quintic(p0, v0, self.accelerations[k], p1, v1, self.accelerations[k + 1], T, tau)
