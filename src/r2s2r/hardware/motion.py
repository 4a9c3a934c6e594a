"""A per-joint second-order motion limiter: the setpoint moves toward its target with bounded
velocity and acceleration, as a real arm's internal motion generator does, so a step target
never turns into a jump.
"""

from __future__ import annotations

import numpy as np

from r2s2r.hardware.kernels import limiter_step


class MotionLimiter:
    def __init__(self, max_velocity: np.ndarray, max_acceleration: np.ndarray, position: np.ndarray):
        self.max_velocity = np.ascontiguousarray(max_velocity, float)
        self.max_acceleration = np.ascontiguousarray(max_acceleration, float)
        self.position = np.array(position, float)
        self.velocity = np.zeros_like(self.position)

    def reset(self, position: np.ndarray) -> None:
        self.position[:] = position
        self.velocity[:] = 0.0

    def step(self, target: np.ndarray, dt: float, target_velocity: np.ndarray | None = None) -> np.ndarray:
        """Advance by dt toward `target` (moving at `target_velocity`, if known); returns the setpoint."""
        target = np.ascontiguousarray(target, dtype=float)
        land = target_velocity is None  # a target at rest: land on it once it is reachable this cycle
        target_velocity = np.zeros_like(target) if land else np.ascontiguousarray(target_velocity, dtype=float)
        limiter_step(self.position, self.velocity, target, target_velocity, land, float(dt),
                     self.max_velocity, self.max_acceleration)
        return self.position
