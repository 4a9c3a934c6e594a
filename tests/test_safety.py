"""The safety layer under random and hostile command streams: whatever arrives, the setpoints
that reach the backend never break a position, velocity or acceleration limit, and a stream
that goes silent brakes to a stop within the limits."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from r2s2r.contract import CommandError, JointSample
from r2s2r.hardware.base import Hardware
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.safety import SafetyFilter, SafetyLimits
from r2s2r.robots import get_robot

FR3 = get_robot("franka_fr3")
LIMITS = FR3.limits


class RecordingHardware(Hardware):
    """A backend that follows its setpoints exactly and records every one of them."""

    backend = "recording"

    def __init__(self, robot):
        super().__init__(robot)
        self.t = 0.0
        self.position = robot.home_positions.copy()
        self.written: list[np.ndarray] = []

    def connect(self):
        pass

    def disconnect(self):
        pass

    def reset(self):
        pass

    @property
    def now(self):
        return self.t

    def read(self):
        names = self.robot.joint_names + self.robot.gripper_joint_names
        fingers = np.full(len(self.robot.gripper_joint_names), 0.02)
        zeros = np.zeros(len(names))
        return JointSample(self.t, names, np.concatenate([self.position, fingers]), zeros, zeros)

    def write(self, command, gripper_openings):
        self.position = np.array(command.position)
        self.written.append(self.position)
        self.t += 1e-3


def assert_within_limits(written, dt):
    q = np.array(written)
    assert np.all(q >= LIMITS.lower - 1e-9) and np.all(q <= LIMITS.upper + 1e-9)
    v = np.diff(q, axis=0) / dt
    assert np.all(np.abs(v) <= LIMITS.velocity * (1 + 1e-6) + 1e-9), np.abs(v).max(axis=0)
    a = np.diff(v, axis=0) / dt
    assert np.all(np.abs(a) <= LIMITS.acceleration * (1 + 1e-6) + 1e-6), np.abs(a).max(axis=0)


hostile_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                          st.floats(-10, 10), st.just(math.nan), st.just(1e300))
command = st.one_of(
    st.lists(hostile_value, min_size=0, max_size=9),  # wrong lengths, NaN, huge values
    st.lists(st.floats(-3, 3), min_size=7, max_size=7),  # well formed, often out of limits
    st.builds(lambda u: list(LIMITS.lower + (LIMITS.upper - LIMITS.lower) * np.array(u)),
              st.lists(st.floats(0, 1), min_size=7, max_size=7)),  # valid targets far apart: jumps
)
# (cycles of silence before the command, the command, how many times it is repeated: bursts)
stream = st.lists(st.tuples(st.integers(0, 400), command, st.integers(1, 5)), min_size=1, max_size=25)


def _between_limits(u):
    return list(LIMITS.lower + (LIMITS.upper - LIMITS.lower) * np.array(u))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream)
# Found by hypothesis: jumps between the lower and upper limits, then silence; joint 7 crept onto
# its lower limit and the position clamp stopped it at 11 rad/s^2 (the filter now brakes ahead).
@example([(0, _between_limits([0.0] * 7), 1), (83, _between_limits([0.0] * 6 + [1.0]), 1),
          (89, _between_limits([0.0] * 7), 1), (143, [], 1), (291, _between_limits([0.0] * 6 + [1.0]), 1),
          (147, _between_limits([0.0] * 7), 1), (214, [], 1), (242, [], 1)])
def test_hostile_streams_never_break_a_limit(events):
    hw = RecordingHardware(FR3)
    loop = ControlLoop(hw, 1000.0)
    for silence, values, repeats in events:
        for _ in range(silence):
            loop.cycle()
        for _ in range(repeats):
            try:
                loop.controller.command_positions("arm", values, hw.now)
            except CommandError:
                pass
    for _ in range(300):
        loop.cycle()
    assert_within_limits(hw.written, loop.dt)


def test_silence_brakes_within_the_limits_and_holds():
    hw = RecordingHardware(FR3)
    loop = ControlLoop(hw, 1000.0, SafetyLimits.of(FR3, watchdog_s=0.2))
    far = FR3.home_positions + np.array([1.5, 0.5, 1.5, 0.5, 1.5, -0.5, 1.5])
    loop.controller.command_positions("arm", far, hw.now)
    for _ in range(3000):  # the stream goes silent straight away
        loop.cycle()
    assert loop.controller.stats.watchdog_stops == 1
    final = hw.written[-1]
    assert np.max(np.abs(final - far)) > 0.1  # it stopped short of the stale target ...
    assert np.allclose(hw.written[-1], hw.written[-100])  # ... and holds still
    assert_within_limits(hw.written, loop.dt)


def test_a_steady_stream_is_not_stopped_by_the_watchdog():
    hw = RecordingHardware(FR3)
    loop = ControlLoop(hw, 1000.0, SafetyLimits.of(FR3, watchdog_s=0.2))
    target = FR3.home_positions.copy()
    for i in range(2000):
        if i % 20 == 0:  # 50 Hz, like a policy
            target[0] = FR3.home[FR3.joint_names[0]] + 0.3 * math.sin(i * 1e-3)
            loop.controller.command_positions("arm", target, hw.now)
        loop.cycle()
    assert loop.controller.stats.watchdog_stops == 0


def test_filter_brakes_ahead_of_a_position_limit_and_stops_on_it():
    f = SafetyFilter(SafetyLimits.of(FR3), 1e-3, FR3.home_positions)
    setpoint = FR3.home_positions.copy()
    setpoint[0] = LIMITS.upper[0] + 1.0  # beyond the limit: clamped onto it, approached at full speed
    written = [f(setpoint) for _ in range(4000)]
    assert_within_limits(written, 1e-3)
    assert written[-1][0] == pytest.approx(LIMITS.upper[0], abs=1e-9) and f.velocity[0] == 0.0
    assert f.interventions["position_limit"] > 0


def test_filter_counts_each_intervention_with_its_reason():
    f = SafetyFilter(SafetyLimits.of(FR3), 1e-3, FR3.home_positions)
    jump = FR3.home_positions + 1.0
    out = f(jump)
    assert np.all(np.abs(out - FR3.home_positions) <= LIMITS.acceleration * 1e-6 + 1e-12)
    assert f.interventions["velocity_limit"] == 1 and f.interventions["acceleration_limit"] == 1
    beyond = FR3.home_positions.copy()
    beyond[0] = 10.0
    f(beyond)
    assert f.interventions["position_limit"] == 1
    f(np.full(7, np.nan))
    assert f.interventions["non_finite_setpoint"] == 1
