"""The per-cycle arithmetic of the motion limiter and the safety filter, compiled (numba).

One implementation serves the driver node's 1 kHz loop and the evaluation engine: MotionLimiter
and SafetyFilter call `limiter_step` / `safety_step` every cycle, and ControlLoop.run_cycles
calls `track` to run many cycles of a constant target at once (the twin between two commands).
In numpy each cycle cost about 45 us of interpreter and dispatch overhead for a dozen small
array operations, more than the physics step itself; compiled, a cycle costs well under 1 us.

The kernels work in place on the callers' state arrays, one joint at a time (plain IEEE
arithmetic, no fastmath), so a cycle run alone and a cycle run inside `track` are the same.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# Codes of what the safety filter did, the order of SAFETY_REASONS.
POSITION_LIMIT, VELOCITY_LIMIT, ACCELERATION_LIMIT = 0, 1, 2
SAFETY_REASONS = ("position_limit", "velocity_limit", "acceleration_limit")


# Explicit signatures: compiled (or loaded from numba's cache) when this module is imported, so a
# driver's first control cycle never waits for the compiler.
_V = "float64[::1]"


def _compiled(signature: str):
    def compile_(function):
        try:
            return njit(signature, cache=True, nogil=True)(function)
        except RuntimeError:  # nowhere to keep numba's cache (read-only install, no home): compile every start
            return njit(signature, nogil=True)(function)
    return compile_


@njit(inline="always")  # compiled into its callers (and cached with them)
def _clip(x, lo, hi):
    return lo if x < lo else (hi if x > hi else x)


@njit(inline="always")
def _stopping_speed(distance, a, dt):
    """The fastest speed at `distance` (>= 0) from a point from which braking at `a` per cycle
    of `dt` still stops on it; within one cycle of braking, creep the last bit at most a * dt."""
    distance = max(distance, 0.0)
    return max(math.sqrt(2.0 * a * distance) - a * dt, min(distance / dt, a * dt))


@_compiled(f"void({_V}, {_V}, {_V}, {_V}, boolean, float64, {_V}, {_V})")
def limiter_step(position, velocity, target, target_velocity, land, dt, vmax, amax):
    """Move `position` (in place) one cycle toward `target` with bounded velocity and acceleration.

    The fastest approach from which braking at amax still stops on the target; within one cycle
    of braking, creep the last bit at most amax * dt. `land`: the target is at rest (no target
    velocity), so when it can be reached this cycle within the acceleration limit, land on it."""
    for i in range(position.shape[0]):
        a = amax[i]
        error = target[i] - position[i]
        magnitude = abs(error)
        approach = _stopping_speed(magnitude, a, dt)
        desired = approach if error > 0 else (-approach if error < 0 else 0.0)
        desired = _clip(desired + target_velocity[i], -vmax[i], vmax[i])
        velocity[i] += _clip(desired - velocity[i], -a * dt, a * dt)
        step = velocity[i] * dt
        if land and magnitude <= abs(step) + 1e-12 and abs(velocity[i]) <= a * dt * 1.0001:
            position[i] += error
            velocity[i] = 0.0
        else:
            position[i] += step


@_compiled(f"void({_V}, {_V}, {_V}, float64, {_V}, {_V}, {_V}, {_V}, int64[::1])")
def safety_step(position, velocity, setpoint, dt, lower, upper, vmax, amax, counts):
    """Clamp one finite setpoint into the limits, updating the filter's `position` and `velocity`
    in place; counts[reason] goes up by one for each kind of limit this cycle needed.

    Toward a position limit the filter moves no faster than it can still stop at the limit
    within amax, so it brakes ahead of the limit instead of being stopped by it (a stop by
    clipping the position would take more than amax)."""
    hit_position = hit_velocity = hit_acceleration = False
    for i in range(position.shape[0]):
        clamped = _clip(setpoint[i], lower[i], upper[i])
        if clamped != setpoint[i]:
            hit_position = True
        v = (clamped - position[i]) / dt
        limited = _clip(v, -vmax[i], vmax[i])
        if limited != v:
            hit_velocity = True
        braked = _clip(limited, -_stopping_speed(position[i] - lower[i], amax[i], dt),
                       _stopping_speed(upper[i] - position[i], amax[i], dt))
        if abs(braked - limited) > 1e-12:
            hit_position = True
        wanted = braked - velocity[i]
        change = _clip(wanted, -amax[i] * dt, amax[i] * dt)
        if abs(change - wanted) > 1e-12:
            hit_acceleration = True
        velocity[i] = velocity[i] + change
        moved = position[i] + velocity[i] * dt
        inside = _clip(moved, lower[i], upper[i])
        if inside != moved and lower[i] <= position[i] <= upper[i]:
            velocity[i] = (inside - position[i]) / dt  # rounding at the limit: the state stays what was sent
        position[i] = inside
    if hit_position:
        counts[POSITION_LIMIT] += 1
    if hit_velocity:
        counts[VELOCITY_LIMIT] += 1
    if hit_acceleration:
        counts[ACCELERATION_LIMIT] += 1


@_compiled(f"void(int64, {_V}, float64, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, int64[::1], "
           "float64[:, ::1])")
def track(n, target, dt, lim_position, lim_velocity, lim_vmax, lim_amax,
          safe_position, safe_velocity, lower, upper, safe_vmax, safe_amax, counts, out):
    """`n` cycles of limiter then safety filter toward a constant `target`: out[k] is cycle k's setpoint.
    The limiter runs as JointController.update drives it (a target velocity of zero, no landing)."""
    zero = np.zeros_like(target)
    for k in range(n):
        limiter_step(lim_position, lim_velocity, target, zero, False, dt, lim_vmax, lim_amax)
        safety_step(safe_position, safe_velocity, lim_position, dt, lower, upper, safe_vmax, safe_amax, counts)
        out[k, :] = safe_position
