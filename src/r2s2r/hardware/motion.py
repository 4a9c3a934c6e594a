"""A per-joint second-order motion limiter: the setpoint moves toward its target with bounded
velocity and acceleration, as a real arm's internal motion generator does, so a step target
never turns into a jump.
"""

from __future__ import annotations

import numpy as np


class MotionLimiter:
    def __init__(self, max_velocity: np.ndarray, max_acceleration: np.ndarray, position: np.ndarray):
        self.max_velocity = np.asarray(max_velocity, float)
        self.max_acceleration = np.asarray(max_acceleration, float)
        self.position = np.array(position, float)
        self.velocity = np.zeros_like(self.position)

    def reset(self, position: np.ndarray) -> None:
        self.position[:] = position
        self.velocity[:] = 0.0

    def step(self, target: np.ndarray, dt: float, target_velocity: np.ndarray | None = None) -> np.ndarray:
        """Advance by dt toward `target` (moving at `target_velocity`, if known); returns the setpoint."""
        amax, vmax = self.max_acceleration, self.max_velocity
        error = target - self.position
        # The fastest approach from which braking at amax still stops on the target.
        # Within one cycle of braking, creep the last bit at most amax * dt.
        approach = np.maximum(np.sqrt(2.0 * amax * np.abs(error)) - amax * dt,
                              np.minimum(np.abs(error) / dt, amax * dt))
        desired = np.sign(error) * approach
        if target_velocity is not None:
            desired = desired + target_velocity
        desired = np.clip(desired, -vmax, vmax)
        self.velocity += np.clip(desired - self.velocity, -amax * dt, amax * dt)
        step = self.velocity * dt
        # Close enough to stop this cycle without breaking the acceleration limit: land on it.
        settle = (np.abs(error) <= np.abs(step) + 1e-12) & (np.abs(self.velocity) <= amax * dt * 1.0001) \
            if target_velocity is None else np.zeros_like(error, dtype=bool)
        self.position += np.where(settle, error, step)
        self.velocity[settle] = 0.0
        return self.position
