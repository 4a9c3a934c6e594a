"""The per-cycle arithmetic of the motion limiter and the safety filter, compiled (numba).

One implementation serves the driver node's 1 kHz loop and the evaluation engine: MotionLimiter
and SafetyFilter call `limiter_step` / `safety_step` every cycle, and ControlLoop.run_cycles
calls `track` to run many cycles of a constant target at once (the twin between two commands).
Compiled, because a dozen small numpy operations per joint per cycle cost more than the physics.

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


@njit(inline="always")
def _chase(position, velocity, target, target_velocity, dt, vmax, amax, slowest, fastest):
    """The velocity for this cycle that closes on a target moving at `target_velocity` as fast as
    the limits allow while braking ahead of it (so it arrives with the target's speed instead of
    overshooting), within [slowest, fastest] and one cycle's change of amax."""
    error = target - position
    approach = _stopping_speed(abs(error), amax, dt)
    desired = target_velocity + (approach if error > 0 else (-approach if error < 0 else 0.0))
    desired = _clip(_clip(desired, -vmax, vmax), slowest, fastest)
    return velocity + _clip(desired - velocity, -amax * dt, amax * dt)


@njit(inline="always")
def _can_land(error, velocity, dt, vmax, amax):
    """Whether a target at rest `error` away can be reached this cycle with the next cycle's stop
    within the limits too: the step's speed and both speed changes stay within vmax and amax * dt."""
    step = error / dt
    return abs(step) <= min(vmax, amax * dt) and abs(step - velocity) <= amax * dt


@_compiled(f"void({_V}, {_V}, {_V}, {_V}, float64, {_V}, {_V})")
def limiter_step(position, velocity, target, target_velocity, dt, vmax, amax):
    """Move `position` (in place) one cycle toward `target` with bounded velocity and acceleration.

    The fastest approach from which braking at amax still stops on the target; within one cycle
    of braking, creep the last bit at most amax * dt. A target at rest (target velocity zero) is
    landed on once it can be reached this cycle within the limits. `velocity` is always the speed
    of the step just taken, so the limiter's output obeys its own limits."""
    for i in range(position.shape[0]):
        error = target[i] - position[i]
        if target_velocity[i] == 0.0 and _can_land(error, velocity[i], dt, vmax[i], amax[i]):
            velocity[i] = error / dt
            position[i] = target[i]
            continue
        velocity[i] = _chase(position[i], velocity[i], target[i], target_velocity[i], dt, vmax[i], amax[i],
                             -vmax[i], vmax[i])
        position[i] += velocity[i] * dt


# Rounding that the feasibility test forgives: a limiter that keeps its limits exactly in real
# arithmetic can exceed them by a few ulps in floating point.
_FEASIBLE_RTOL = 1e-9


@_compiled(f"boolean({_V}, {_V}, {_V}, {_V}, float64, {_V}, {_V}, {_V}, {_V}, {_V}, int64[::1])")
def safety_step(position, velocity, last_input, setpoint, dt, lower, upper, vmax, amax, dmax, counts):
    """One cycle of the safety filter: its output (`position`, updated in place with `velocity`,
    the speed of the step it takes) follows `setpoint` within the position, velocity and
    acceleration limits; counts[reason] goes up by one for each kind of limit this cycle needed.

    A setpoint that the limits allow is passed through exactly. One they do not allow (a jump,
    a lag the limits cannot absorb, a target beyond a position limit) is chased like a moving
    target: its speed is estimated from `last_input` (the previous clamped setpoint, updated in
    place), and the output closes on it along the time-optimal profile that brakes ahead of it,
    so it arrives without overshooting, lands on it once it is at rest and from then on writes
    it unchanged. Toward a position limit the output never moves faster than it can still stop
    on the limit at `dmax` (at most amax; a robot whose controller wants gentler braking near
    its limits gives less), so it is braked ahead of the limit rather than stopped by it. Returns
    whether it changed the setpoint."""
    hit_position = hit_velocity = hit_acceleration = False
    for i in range(position.shape[0]):
        lo, hi, v_max, a = lower[i], upper[i], vmax[i], amax[i]
        p, v = position[i], velocity[i]
        target = _clip(setpoint[i], lo, hi)
        target_velocity = _clip((target - last_input[i]) / dt, -v_max, v_max)
        last_input[i] = target
        # Toward a limit no faster than braking at `a` still stops on it.
        fastest = _stopping_speed(hi - p, dmax[i], dt)
        slowest = -_stopping_speed(p - lo, dmax[i], dt)
        step = (target - p) / dt
        slack = _FEASIBLE_RTOL * v_max
        over_speed = abs(step) > v_max + slack
        over_acceleration = abs(step - v) > a * dt * (1.0 + _FEASIBLE_RTOL)
        within_speed = _clip(step, -v_max, v_max)  # a position limit counts only where it binds beyond vmax
        over_limit = target != setpoint[i] or within_speed > fastest + slack or within_speed < slowest - slack
        if not (over_speed or over_acceleration or over_limit):
            velocity[i] = step
            position[i] = target
            continue
        hit_velocity |= over_speed
        hit_acceleration |= over_acceleration
        hit_position |= over_limit
        if target_velocity == 0.0 and _can_land(target - p, v, dt, v_max, a):
            moved = target
        else:
            moved = p + _chase(p, v, target, target_velocity, dt, v_max, a, slowest, fastest) * dt
        moved = _clip(moved, lo, hi)  # rounding at a limit: never past it
        velocity[i] = (moved - p) / dt
        position[i] = moved
    if hit_position:
        counts[POSITION_LIMIT] += 1
    if hit_velocity:
        counts[VELOCITY_LIMIT] += 1
    if hit_acceleration:
        counts[ACCELERATION_LIMIT] += 1
    return hit_position or hit_velocity or hit_acceleration


@_compiled(f"void({_V}, {_V}, {_V}, {_V}, {_V})")
def follow(lim_position, lim_velocity, safe_position, safe_velocity, safe_last_input):
    """After the filter changed a setpoint, the limiter plans on from what was written (anti-windup:
    a limiter left running ahead of the arm's setpoints would drag the filter after it)."""
    lim_position[:] = safe_position
    lim_velocity[:] = safe_velocity
    safe_last_input[:] = safe_position


@_compiled(f"void(int64, {_V}, float64, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, {_V}, "
           "int64[::1], float64[:, ::1])")
def track(n, target, dt, lim_position, lim_velocity, lim_vmax, lim_amax,
          safe_position, safe_velocity, safe_last_input, lower, upper, safe_vmax, safe_amax, safe_dmax, counts, out):
    """`n` cycles of limiter then safety filter toward a constant `target`: out[k] is cycle k's setpoint.
    The limiter runs as JointController.update drives it (a target at rest) and follows the filter
    where the filter changed its output, as ControlLoop.cycle does."""
    zero = np.zeros_like(target)
    for k in range(n):
        limiter_step(lim_position, lim_velocity, target, zero, dt, lim_vmax, lim_amax)
        if safety_step(safe_position, safe_velocity, safe_last_input, lim_position, dt, lower, upper, safe_vmax,
                       safe_amax, safe_dmax, counts):
            follow(lim_position, lim_velocity, safe_position, safe_velocity, safe_last_input)
        out[k, :] = safe_position
