"""The safety layer under random and hostile command streams, for every robot of the registry and
every joint group: whatever arrives (position streams, trajectories, gripper commands, estops and
enables, then silence), the setpoints that reach the backend

(a) never break a position, velocity or acceleration limit,
(b) come to rest within the worst-case stopping time once the commands stop, then stay exactly
    constant,
(c) after an estop stop within the stopping distance and stay put until enable,
(d) equal the filter's input whenever that input is feasible (the filter acts only when it must).
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from r2s2r.contract import CommandError, JointSample
from r2s2r.hardware.base import Hardware
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.safety import SafetyFilter, SafetyLimits
from r2s2r.robots import get_robot, robot_names

FR3 = get_robot("franka_fr3")
LIMITS = FR3.limits
ROBOTS = robot_names()
RTOL = 1e-6  # what rounding may add to a limit in the checks below


class RecordingHardware(Hardware):
    """A backend that follows its setpoints exactly and records every one of them."""

    backend = "recording"

    def __init__(self, robot, dt=1e-3):
        super().__init__(robot)
        self.t = 0.0
        self.dt = dt
        self.position = robot.home_positions.copy()
        self.written: list[np.ndarray] = []
        self.openings: list[np.ndarray] = []

    def on_configure(self):
        pass

    def on_cleanup(self):
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

    def write(self, command, gripper_openings, gripper_forces=None):
        self.position = np.array(command.position)
        self.written.append(self.position)
        self.openings.append(np.array(gripper_openings, dtype=float))
        self.t += self.dt


class FilterProbe:
    """Stands in for a ControlLoop's SafetyFilter and records (state before, input, output) per call."""

    def __init__(self, inner: SafetyFilter):
        self.inner = inner
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def __call__(self, setpoint):
        before = (self.inner.position.copy(), self.inner.velocity.copy())
        out = self.inner(setpoint)
        self.calls.append((*before, np.array(setpoint, dtype=float), out))
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def assert_within_limits(written, dt, limits=LIMITS):
    q = np.array(written)
    assert np.all(q >= limits.lower - 1e-9) and np.all(q <= limits.upper + 1e-9)
    v = np.diff(q, axis=0) / dt
    assert np.all(np.abs(v) <= limits.velocity * (1 + RTOL) + 1e-9), np.abs(v).max(axis=0)
    a = np.diff(v, axis=0) / dt
    assert np.all(np.abs(a) <= limits.acceleration * (1 + RTOL) + 1e-6), np.abs(a).max(axis=0)


def stopping_speed(distance, a, dt):
    """The braking curve the filter keeps to toward a position limit (kernels._stopping_speed), for arrays."""
    distance = np.maximum(distance, 0.0)
    return np.maximum(np.sqrt(2 * a * distance) - a * dt, np.minimum(distance / dt, a * dt))


def feasible(limits, dt, position, velocity, setpoint):
    """Per joint (arrays of any leading shape): whether `setpoint` is a step the limits allow from the
    filter's state, with a margin of RTOL inside every limit (so rounding cannot tip a borderline step)."""
    step = (setpoint - position) / dt
    margin = 1 - RTOL
    a = limits.acceleration
    return ((setpoint >= limits.lower) & (setpoint <= limits.upper)
            & (np.abs(step) <= limits.velocity * margin)
            & (np.abs(step - velocity) <= a * dt * margin)
            & (step <= stopping_speed(limits.upper - position, a, dt) * margin)
            & (step >= -stopping_speed(position - limits.lower, a, dt) * margin))


# -- streams of everything a client can send --------------------------------------------------------
hostile_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                          st.floats(-10, 10), st.just(math.nan), st.just(1e300))


def _between(lower, upper, fractions):
    return list(lower + (upper - lower) * np.array(fractions))


@st.composite
def group_positions(draw, robot, group):
    """A command for one group: hostile lists, well-formed ones often out of limits, valid jumps."""
    g = robot.group(group)
    index = [robot.joint_names.index(j) for j in g.joints]
    lower, upper = robot.limits.lower[index], robot.limits.upper[index]
    n = len(index)
    return draw(st.one_of(
        st.lists(hostile_value, min_size=0, max_size=n + 2),
        st.lists(st.floats(-3, 3), min_size=n, max_size=n),
        st.builds(lambda u: _between(lower, upper, u), st.lists(st.floats(0, 1), min_size=n, max_size=n)),
    ))


@st.composite
def trajectory(draw, robot, group):
    """(names, times, positions, velocities or None): in or out of the limits, times possibly unsorted."""
    g = robot.group(group)
    index = [robot.joint_names.index(j) for j in g.joints]
    lower, upper = robot.limits.lower[index], robot.limits.upper[index]
    n, points = len(index), draw(st.integers(1, 4))
    times = draw(st.one_of(
        st.lists(st.floats(0.01, 2.0), min_size=points, max_size=points).map(lambda t: list(np.cumsum(t) / points)),
        st.lists(st.floats(-1.0, 2.0), min_size=points, max_size=points)))
    rows = draw(st.lists(st.one_of(
        st.builds(lambda u: _between(lower, upper, u), st.lists(st.floats(0, 1), min_size=n, max_size=n)),
        st.lists(st.floats(-4, 4), min_size=n, max_size=n)), min_size=points, max_size=points))
    velocities = draw(st.one_of(st.none(), st.lists(st.lists(st.floats(-5, 5), min_size=n, max_size=n),
                                                    min_size=points, max_size=points)))
    return list(g.joints), times, rows, velocities


@st.composite
def events(draw, robot):
    """A list of (cycles of silence before it, event) for `robot`."""
    group = st.sampled_from(robot.group_names)
    kinds = [
        group.flatmap(lambda g: st.tuples(st.just("positions"), st.just(g), group_positions(robot, g),
                                          st.integers(1, 5))),
        group.flatmap(lambda g: st.tuples(st.just("trajectory"), st.just(g), trajectory(robot, g))),
        st.tuples(st.just("estop")),
        st.tuples(st.just("enable")),
    ]
    if robot.grippers:
        kinds.append(st.tuples(st.just("gripper"), st.sampled_from([g.name for g in robot.grippers]),
                               st.lists(hostile_value | st.floats(-0.01, 0.12), min_size=0, max_size=2)))
    return draw(st.lists(st.tuples(st.integers(0, 300), st.one_of(*kinds)), min_size=1, max_size=20))


class Session:
    """A ControlLoop on RecordingHardware played a list of events, keeping what the checks need."""

    def __init__(self, robot, watchdog_s=0.5):
        self.robot = robot
        self.hw = RecordingHardware(robot)
        self.loop = ControlLoop(self.hw, 1000.0, SafetyLimits.of(robot, watchdog_s=watchdog_s))
        self.probe = FilterProbe(self.loop.safety)
        self.loop.safety = self.probe
        self.last_event = 0.0  # robot time of the last event
        self.estops: list[tuple[int, np.ndarray, np.ndarray, int | None]] = []  # (cycle, p, v, enable cycle)

    def cycles(self, n):
        for _ in range(n):
            self.loop.cycle()

    def play(self, silence, event):
        loop, now = self.loop, self.hw.now
        self.cycles(silence)
        kind = event[0]
        latched = loop.estopped
        try:
            if kind == "positions":
                for _ in range(event[3]):
                    loop.controller.command_positions(event[1], event[2], self.hw.now)
            elif kind == "trajectory":
                names, times, rows, velocities = event[2]
                loop.controller.command_trajectory(event[1], names, 0.0, times, rows, velocities, None, self.hw.now)
            elif kind == "gripper":
                loop.controller.command_gripper(event[1], event[2], self.hw.now)
        except CommandError as error:
            if latched:
                assert "estop" in str(error)  # refused because of the latch, and says so
        else:
            assert not latched or kind in ("estop", "enable"), "a command was taken while the estop was latched"
        if kind == "estop" and not latched:
            loop.estop()
            self.estops.append((len(self.hw.written), loop.safety.position.copy(), loop.safety.velocity.copy(), None))
        elif kind == "enable":
            loop.enable()
            if self.estops and self.estops[-1][3] is None:
                self.estops[-1] = (*self.estops[-1][:3], len(self.hw.written))
        self.last_event = now + silence * loop.dt

    def quiet_from(self) -> float:
        """When nothing sent so far can still move the arm: the watchdog's deadline after the last
        event, or the end of the last trajectory still running."""
        ends = [g.trajectory.end_time for g in self.loop.controller.groups.values() if g.trajectory is not None]
        return max([self.last_event + self.loop.limits.watchdog_s, *ends])


def worst_case_rest_time(limits) -> float:
    """From anywhere at any speed: brake, cross the whole range at full speed, brake onto the target."""
    return float(np.max((limits.upper - limits.lower) / limits.velocity + 2 * limits.velocity / limits.acceleration))


def check_session(session: Session):
    hw, loop = session.hw, session.loop
    limits, dt = loop.limits, loop.dt
    written = np.array(hw.written)
    # (a)
    assert_within_limits(written, dt, limits)
    # (b) at rest by the worst-case stopping time after the last thing that could move it, then constant
    rest = int(math.ceil((session.quiet_from() + worst_case_rest_time(limits)) / dt)) + 5
    assert rest < len(written) - 100, "the session did not run long enough to check rest"
    assert np.array_equal(written[rest:], np.broadcast_to(written[-1], written[rest:].shape)), (
        np.abs(written[rest:] - written[-1]).max(axis=0))
    # (c) each estop: within the stopping distance of where it was engaged, and still once stopped
    for cycle, p, v, enabled in session.estops:
        until = len(written) if enabled is None else enabled
        after = written[cycle:until]
        if len(after) == 0:
            continue
        reach = v**2 / (2 * limits.acceleration) + 2 * np.abs(v) * dt + limits.acceleration * dt**2
        moved = after - p
        assert np.all(np.abs(moved) <= np.abs(reach) + 1e-9), (np.abs(moved).max(axis=0), reach)
        stopped = int(math.ceil(np.max(np.abs(v) / limits.acceleration) / dt)) + 3
        if stopped < len(after):
            assert np.array_equal(after[stopped:], np.broadcast_to(after[-1], after[stopped:].shape))
            openings = np.array(hw.openings[cycle:until])
            assert np.array_equal(openings, np.broadcast_to(openings[0], openings.shape))  # no gripper command
    # (d) a feasible input is passed through exactly
    p, v, setpoint, out = (np.array(column) for column in zip(*session.probe.calls))
    ok = feasible(limits, dt, p, v, setpoint)
    assert np.array_equal(out[ok], setpoint[ok]), np.abs(out[ok] - setpoint[ok]).max()


@pytest.mark.parametrize("name", ROBOTS)
def test_any_stream_keeps_the_limits_comes_to_rest_and_estop_holds(name):
    robot = get_robot(name)

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(events(robot), st.booleans())
    def run(sequence, release_at_end):
        session = Session(robot)
        for silence, event in sequence:
            session.play(silence, event)
        if release_at_end and session.loop.estopped:
            session.play(0, ("enable",))
        session.cycles(int((session.quiet_from() - session.hw.now + worst_case_rest_time(session.loop.limits))
                           / session.loop.dt) + 400)
        check_session(session)

    run()


def _between_limits(u):
    return list(LIMITS.lower + (LIMITS.upper - LIMITS.lower) * np.array(u))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 400), group_positions(FR3, "arm"), st.integers(1, 5)),
                min_size=1, max_size=25))
# Found by hypothesis: jumps between the lower and upper limits, then silence; joint 7 crept onto
# its lower limit and the position clamp stopped it at 11 rad/s^2 (the filter now brakes ahead).
@example([(0, _between_limits([0.0] * 7), 1), (83, _between_limits([0.0] * 6 + [1.0]), 1),
          (89, _between_limits([0.0] * 7), 1), (143, [], 1), (291, _between_limits([0.0] * 6 + [1.0]), 1),
          (147, _between_limits([0.0] * 7), 1), (214, [], 1), (242, [], 1)])
def test_hostile_position_streams_on_the_fr3(stream):
    session = Session(FR3)
    for silence, values, repeats in stream:
        session.play(silence, ("positions", "arm", values, repeats))
    session.cycles(int((session.quiet_from() - session.hw.now + worst_case_rest_time(session.loop.limits))
                       / session.loop.dt) + 400)
    check_session(session)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ROBOTS), st.data())
def test_the_filter_passes_any_feasible_setpoint_through_unchanged(name, data):
    """(d) directly: from any state the filter can be in, a step within every limit comes out as it went in."""
    robot = get_robot(name)
    limits, dt = SafetyLimits.of(robot), 1e-3
    n = len(robot.joint_names)
    u = np.array(data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)))
    position = limits.lower + (limits.upper - limits.lower) * u
    top = stopping_speed(limits.upper - position, limits.acceleration, dt)
    bottom = stopping_speed(position - limits.lower, limits.acceleration, dt)
    speed_u = np.array(data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)))
    velocity = -np.minimum(bottom, limits.velocity) + speed_u * (np.minimum(top, limits.velocity)
                                                               + np.minimum(bottom, limits.velocity))
    change = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n))) * limits.acceleration * dt
    setpoint = np.clip(position + (velocity + change) * dt, limits.lower, limits.upper)
    f = SafetyFilter(limits, dt, position)
    f.velocity[:] = velocity
    f.last_input[:] = position
    ok = feasible(limits, dt, position, velocity, setpoint)
    out = f(setpoint)
    assert np.array_equal(out[ok], setpoint[ok])
    if ok.all():
        assert not f.intervened and not f.interventions


def test_the_hostile_stream_reproduction_comes_to_rest_on_the_twin():
    """../shared/repro/hostile_stream_oscillation.py as a test: 3 s of hostile commands into the FR3
    twin, then 10 s of silence. Before the fix the setpoints still swung by 0.6 to 1.6 rad per joint
    ten seconds later; now they rest within the worst-case time after the watchdog and stay put."""
    from r2s2r.hardware.sim import SimHardware
    from r2s2r.sim.scene import load_scene

    hw = SimHardware(load_scene("config/scenes/franka_table.yaml"))
    hw.on_configure()
    hw.on_activate()
    loop = ControlLoop(hw)
    arm = [i for i, n in enumerate(hw.robot.joint_names) if "finger" not in n][:7]
    home = loop.positions()[arm]
    written = []
    write = hw.write

    def recording_write(command, grippers, forces=None):
        written.append((hw.now, np.array(command.position)[arm]))
        write(command, grippers, forces)
    hw.write = recording_write
    rng = np.random.default_rng(3)
    for k in range(300):
        kind = k % 6
        command = {0: lambda: home + rng.uniform(-3, 3, 7), 1: lambda: np.full(7, np.nan),
                   2: lambda: home[:5] + rng.uniform(-1, 1, 5), 3: lambda: np.full(7, 1e9)}.get(
                       kind, lambda: home + rng.uniform(-1.5, 1.5, 7))()
        try:
            loop.controller.command_positions("arm", command, hw.now)
        except CommandError:
            pass
        loop.run_until(hw.now + 0.01)
    end = hw.now
    for _ in range(10000):
        loop.cycle()
    t = np.array([w[0] for w in written])
    setpoints = np.array([w[1] for w in written])
    assert loop.controller.stats.accepted["arm_position"] > 20  # the stream did move the arm
    rest = end + loop.limits.watchdog_s + worst_case_rest_time(loop.limits)
    settled = setpoints[t > rest]
    assert len(settled) > 5000 and np.array_equal(settled, np.broadcast_to(settled[-1], settled.shape))
    assert_within_limits(setpoints, loop.dt, FR3.limits)


def test_enable_mid_brake_keeps_braking_within_the_acceleration_limit():
    """Enable while an estop is still braking: the speed falls no faster than the acceleration limit
    (it used to drop to zero in one cycle, 2.9 rad/s lost at once on the FR3)."""
    session = Session(FR3)
    far = np.clip(FR3.home_positions + 1.5, LIMITS.lower, LIMITS.upper)
    for _ in range(400):
        session.loop.controller.command_positions("arm", far, session.hw.now)
        session.cycles(1)
    assert np.max(np.abs(session.loop.safety.velocity)) > 1.0
    session.play(0, ("estop",))
    session.cycles(20)
    assert np.max(np.abs(session.loop.safety.velocity)) > 0.5  # still braking
    session.play(0, ("enable",))
    session.cycles(2000)
    assert_within_limits(session.hw.written, session.loop.dt)
    assert np.array_equal(session.hw.written[-1], session.hw.written[-500])


def test_hold_never_targets_a_point_beyond_a_limit():
    """A joint measured past its limit (a sagging twin, an arm moved by hand) is held on the limit."""
    hw = RecordingHardware(FR3)
    hw.position = FR3.home_positions.copy()
    hw.position[3] = LIMITS.lower[3] - 0.05
    loop = ControlLoop(hw, 1000.0)
    loop.hold_here()
    for _ in range(10):
        loop.cycle()
    assert np.all(np.array(hw.written) >= LIMITS.lower - 1e-12)


def test_the_limiter_does_not_share_the_robots_limit_arrays():
    loop = ControlLoop(RecordingHardware(FR3), 1000.0)
    loop.controller.limiter.max_velocity[:] = 0.0
    loop.safety.bounds[2][:] = 0.0
    assert np.all(FR3.limits.velocity > 0) and np.all(get_robot("franka_fr3").limits.velocity > 0)


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
    assert np.array_equal(hw.written[-1], hw.written[-100])  # ... and holds still
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
    assert not loop.safety.interventions  # a feasible stream: the filter never had to act


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
