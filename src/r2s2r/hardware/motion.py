"""A per-joint second-order motion limiter: the setpoint moves toward its target with bounded
velocity and acceleration, as a real arm's internal motion generator does, so a step target
never turns into a jump.
"""

from __future__ import annotations

import math

import numpy as np

from r2s2r.hardware.kernels import limiter_step


def stopping_point(position, velocity, acceleration, lower, upper) -> np.ndarray:
    """Where braking at `acceleration` from (position, velocity) stops, within [lower, upper]."""
    return np.clip(position + velocity * np.abs(velocity) / (2 * acceleration), lower, upper)


# Poses along a braking path lie at most this far apart on every joint (rad), at most this many.
PATH_STEP_RAD = 0.03
MAX_PATH_POSES = 8


def braking_path(position, velocity, acceleration, lower, upper, step: float = PATH_STEP_RAD) -> np.ndarray:
    """Poses along braking at `acceleration` from (position, velocity), per joint, from the start to
    the stop, at most `step` apart on every joint (at most MAX_PATH_POSES rows)."""
    position = np.asarray(position, dtype=float)
    velocity = np.asarray(velocity, dtype=float)
    stop_time = np.abs(velocity) / acceleration
    horizon = float(stop_time.max()) if stop_time.size else 0.0
    distance = velocity * velocity / (2 * acceleration)
    n = int(min(MAX_PATH_POSES - 1, max(1, math.ceil(float(distance.max(initial=0.0)) / step))))
    t = np.minimum(np.linspace(0.0, horizon, n + 1)[:, None], stop_time[None, :])
    poses = position + velocity * t - np.sign(velocity) * acceleration * t * t / 2
    return np.clip(poses, lower, upper)


class MotionLimiter:
    def __init__(self, max_velocity: np.ndarray, max_acceleration: np.ndarray, position: np.ndarray):
        # Copies: the limiter must never share (and so never change) a robot's limit arrays.
        self.max_velocity = np.array(max_velocity, dtype=float)
        self.max_acceleration = np.array(max_acceleration, dtype=float)
        self.position = np.array(position, dtype=float)
        self.velocity = np.zeros_like(self.position)

    def reset(self, position: np.ndarray) -> None:
        self.position[:] = position
        self.velocity[:] = 0.0

    def step(self, target: np.ndarray, dt: float, target_velocity: np.ndarray | None = None) -> np.ndarray:
        """Advance by dt toward `target` (moving at `target_velocity`, if known; a joint whose target
        velocity is zero lands on its target once it can); returns the setpoint."""
        target = np.ascontiguousarray(target, dtype=float)
        target_velocity = (np.zeros_like(target) if target_velocity is None
                           else np.ascontiguousarray(target_velocity, dtype=float))
        limiter_step(self.position, self.velocity, target, target_velocity, float(dt),
                     self.max_velocity, self.max_acceleration)
        return self.position

    def stopping_point(self, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """Where braking at the acceleration limits from the current state stops, within [lower, upper]."""
        return stopping_point(self.position, self.velocity, self.max_acceleration, lower, upper)
