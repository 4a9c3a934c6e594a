"""The command path without ROS: trajectories interpolate as joint_trajectory_controller does,
bad commands are rejected with a clear message and change nothing."""

import numpy as np
import pytest

from r2s2r.contract import CommandError, JointNamesError
from r2s2r.hardware.controller import JointController
from r2s2r.hardware.trajectory import TrajectorySampler
from r2s2r.robots import get_robot

FR3 = get_robot("franka_fr3")
JOINTS = FR3.group("arm").joints


def controller():
    return JointController(FR3, FR3.home_positions)


def test_linear_segments_for_positions_only():
    s = TrajectorySampler(10.0, np.array([1.0, 3.0]), np.array([[1.0], [2.0]]), None, None,
                          np.array([0.0]), np.array([0.0]))
    assert s.sample(10.5)[0] == pytest.approx([0.5])
    assert s.sample(12.0)[0] == pytest.approx([1.5])
    assert s.sample(12.0)[1] == pytest.approx([0.5])
    assert s.sample(20.0)[0] == pytest.approx([2.0])


def test_cubic_segments_match_hermite_by_hand():
    # From 0 at rest to 1 with zero end velocity over 2 s: p(t) = 3(t/2)^2 - 2(t/2)^3.
    s = TrajectorySampler(0.0, np.array([2.0]), np.array([[1.0]]), np.array([[0.0]]), None,
                          np.array([0.0]), np.array([0.0]))
    for t in (0.5, 1.0, 1.5):
        u = t / 2
        assert s.sample(t)[0] == pytest.approx([3 * u**2 - 2 * u**3])
    assert s.sample(1.0)[1] == pytest.approx([0.75])  # 6u(1-u)/T at u = 1/2


def test_quintic_segments_have_zero_end_acceleration():
    s = TrajectorySampler(0.0, np.array([1.0]), np.array([[1.0]]), np.array([[0.0]]), np.array([[0.0]]),
                          np.array([0.0]), np.array([0.0]))
    # Minimum-jerk profile: 10u^3 - 15u^4 + 6u^5.
    u = 0.3
    assert s.sample(0.3)[0] == pytest.approx([10 * u**3 - 15 * u**4 + 6 * u**5])


@pytest.mark.parametrize("values,match", [
    ([0.0] * 6, "got 6 values, expected 7"),
    ([float("nan")] + [0.0] * 6, "expected finite numbers"),
    ([float("inf")] + [0.0] * 6, "expected finite numbers"),
    ([3.0, 0, 0, -1.0, 0, 1.5, 0], r"outside the joint limits: fr3_joint1=3.0000 not in \[-2.7437, 2.7437\]"),
])
def test_bad_streaming_commands_are_rejected_and_change_nothing(values, match):
    c = controller()
    before = [g.target.copy() for g in c.groups.values()]
    with pytest.raises(CommandError, match=match):
        c.command_positions("arm", values)
    assert all(np.array_equal(a, g.target) for a, g in zip(before, c.groups.values()))
    assert c.stats.rejected["arm_position"] == 1


def test_trajectory_with_unknown_or_repeated_joints_is_rejected():
    c = controller()
    with pytest.raises(JointNamesError, match=r"unknown joint names \['joint1'\]"):
        c.command_trajectory("arm", ("joint1",) + JOINTS[1:], 0.0, [1.0], [FR3.home_positions], None, None, 0.0)
    with pytest.raises(JointNamesError, match="joint names repeat"):
        c.command_trajectory("arm", JOINTS[:6] + JOINTS[:1], 0.0, [1.0], [FR3.home_positions], None, None, 0.0)
    with pytest.raises(CommandError, match="must increase strictly.*point 1 is at 1 s after point 0 at 1 s; expected a later time"):
        c.command_trajectory("arm", JOINTS, 0.0, [1.0, 1.0], [FR3.home_positions] * 2, None, None, 0.0)
    with pytest.raises(CommandError, match=r"positions of shape \(1, 6\); expected one row per point \(1\) "
                                           r"of one value per joint name \(7\)"):
        c.command_trajectory("arm", JOINTS, 0.0, [1.0], [FR3.home_positions[:6]], None, None, 0.0)
    assert c.active_trajectories() == []


def test_a_trajectory_for_some_joints_holds_the_others():
    c = controller()
    now, dt = 0.0, 1e-3
    c.command_positions("arm", FR3.home_positions + 0.05, now)
    for _ in range(1000):
        c.update(now, dt)
        now += dt
    held = c.limiter.position.copy()
    goal = FR3.home_positions[[6, 2]] - 0.1
    c.command_trajectory("arm", (JOINTS[6], JOINTS[2]), 0.0, [0.5], [goal], None, None, now)
    for _ in range(1500):
        setpoint = c.update(now, dt)
        now += dt
    assert setpoint[[6, 2]] == pytest.approx(goal, abs=1e-9)
    others = [0, 1, 3, 4, 5]
    assert setpoint[others] == pytest.approx(held[others], abs=1e-12)


def test_trajectory_joint_order_is_taken_from_the_message():
    c = controller()
    goal = FR3.home_positions + 0.1
    order = list(reversed(range(7)))
    c.command_trajectory("arm", tuple(JOINTS[i] for i in order), 0.0, [0.5], [goal[order]], None, None, 0.0)
    now, dt = 0.0, 1e-3
    for _ in range(1500):
        setpoint = c.update(now, dt)
        now += dt
    np.testing.assert_allclose(setpoint, goal, atol=1e-9)


def test_gripper_opening_out_of_range_is_rejected():
    c = controller()
    with pytest.raises(CommandError, match=r"gripper=0.2000 not in \[0.0000, 0.0800\] m"):
        c.command_gripper("gripper", [0.2])
    with pytest.raises(CommandError, match="no gripper 'left_gripper'"):
        c.command_gripper("left_gripper", [0.02])
    assert c.gripper_openings() == pytest.approx([0.08])


def _loop_after(batched: bool, watchdog_s: float = 0.5):
    """A twin's ControlLoop streamed a far target (limits engaged) then run 0.6 s, cycle by cycle
    or through run_cycles; returns what the two must agree on."""
    from r2s2r.hardware.loop import ControlLoop
    from r2s2r.hardware.safety import SafetyFilter, SafetyLimits
    from r2s2r.hardware.sim import SimHardware
    from r2s2r.sim.scene import load_scene
    hardware = SimHardware(load_scene("config/scenes/franka_table.yaml"), seed=3)
    hardware.on_configure()
    loop = ControlLoop(hardware, limits=SafetyLimits.of(FR3, watchdog_s=watchdog_s))
    # A filter slower than the limiter plans for, so that it has work to do on both paths.
    loop.safety = SafetyFilter(SafetyLimits.of(FR3, velocity_scale=0.5), loop.dt, loop.positions())
    target = np.clip(FR3.home_positions + 0.6, FR3.limits.lower, FR3.limits.upper)[:7]
    loop.controller.command_positions("arm", target, now=hardware.now)
    loop.controller.command_gripper("gripper", [0.01], now=hardware.now)
    for chunk in (1, 7, 250, 342):  # 600 cycles; the watchdog's deadline falls inside the last chunk
        if batched:
            loop.run_cycles(chunk)
        else:
            for _ in range(chunk):
                loop.cycle()
    twin = hardware.twin
    return (twin.data.qpos.copy(), twin.data.qvel.copy(), twin.data.ctrl.copy(), twin.time, loop.cycles,
            loop.safety.report(), loop.controller.stats.watchdog_stops, loop.controller.limiter.velocity.copy())


@pytest.mark.parametrize("watchdog_s", [0.5, 0.0])
def test_run_cycles_is_the_same_as_cycling_one_at_a_time(watchdog_s):
    one_by_one, batched = _loop_after(False, watchdog_s), _loop_after(True, watchdog_s)
    for a, b in zip(one_by_one, batched):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)  # bit for bit, not approximately
        else:
            assert a == b
    assert one_by_one[5].get("velocity_limit", 0) > 0  # the filter had work to do, and counted it
    assert one_by_one[6] == (1 if watchdog_s else 0)  # the watchdog fired in the span it split
