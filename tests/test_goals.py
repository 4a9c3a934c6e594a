"""FollowJointTrajectory and GripperCommand goals without ROS (hardware.goals), on the driver core
stepping the twin: the tolerance rules, each result code and why, feedback, preemption by a goal
and by a topic command, cancel and estop, a start in the future, a subset of the joints, and the
gripper reaching its goal or stalling, and max_effort bounding its grip."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.contract import JointSample
from r2s2r.hardware.driver import Driver
from r2s2r.hardware.goals import (ABORTED, CANCELED, GOAL_TOLERANCE_VIOLATED, INVALID_GOAL, INVALID_JOINTS,
                                  OLD_HEADER_TIMESTAMP, PATH_TOLERANCE_VIOLATED, PREEMPTED_BY_GOAL, SUCCEEDED,
                                  SUCCESSFUL, GoalRejected, GripperGoal, GripperSettings, JointTolerance,
                                  ToleranceDefaults, TrajectoryGoal, tolerances_for)
from r2s2r.hardware.sim import SimHardware
from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene

FR3 = get_robot("franka_fr3")
JOINTS = FR3.group("arm").joints
HOME = FR3.home_positions[:7]
TICK = 0.004  # the FR3's state tick
ACTION = "arm_controller/follow_joint_trajectory"


@pytest.fixture(scope="module")
def driver():
    driver = Driver(SimHardware(Scene(robot="franka_fr3")))
    driver.start()
    yield driver
    driver.shutdown()


@pytest.fixture
def fresh(driver):
    """The driver enabled, its twin reset to home."""
    driver.enable(True)
    assert driver.reset()[0]
    return driver


def run(driver, goals, seconds: float) -> None:
    """State ticks for `seconds` of robot time, each goal updated after every tick, as driver_node does."""
    for _ in range(int(round(seconds / TICK))):
        sample = driver.tick(TICK)
        for goal in goals:
            goal.update(driver.hardware.now, sample)
        if goals and all(goal.done for goal in goals):
            return


def trajectory_goal(driver, times, points, names=JOINTS, stamp=0.0, defaults=None, **tolerances):
    goal = TrajectoryGoal(driver, "arm", ACTION)
    goal.start(names, stamp, times, np.asarray(points, float), None, None, defaults or ToleranceDefaults(),
               **tolerances)
    return goal


def test_tolerances_follow_the_controllers_rules():
    defaults = ToleranceDefaults(trajectory={"fr3_joint1": 0.1}, goal={"fr3_joint2": 0.05}, goal_time=2.0)
    t = tolerances_for(JOINTS, defaults, path=[("fr3_joint1", 0.0, 0.3, 0.0), ("fr3_joint3", 0.2, -1, 0.0)],
                       goal=[("fr3_joint2", -1, 0.0, 0.0)], goal_time=0.0)
    assert t.path[0] == JointTolerance(0.1, 0.3, 0.0)  # 0 keeps the default, above 0 replaces it
    assert t.path[2] == JointTolerance(0.2, 0.0, 0.0)  # -1 turns the check off
    assert t.goal[1] == JointTolerance(0.0, 0.01, 0.0)  # the goal's velocity: stopped_velocity_tolerance
    assert t.goal_time == 2.0
    assert tolerances_for(JOINTS, defaults, goal_time=0.5).goal_time == 0.5
    with pytest.raises(GoalRejected, match="position -0.5; expected a positive tolerance") as error:
        tolerances_for(JOINTS, defaults, path=[("fr3_joint1", -0.5, 0.0, 0.0)])
    assert error.value.error_code == INVALID_GOAL
    with pytest.raises(GoalRejected, match="names joint 'elbow'") as error:
        tolerances_for(JOINTS, defaults, goal=[("elbow", 0.1, 0.0, 0.0)])
    assert error.value.error_code == INVALID_JOINTS


def test_a_goal_reached_succeeds_with_feedback(fresh):
    target = HOME + 0.1
    order = [6, 0, 3, 1, 5, 2, 4]  # any order of the names
    goal = trajectory_goal(fresh, [0.5], [target[order]], names=[JOINTS[i] for i in order])
    assert not goal.done
    run(fresh, [goal], 0.25)
    feedback = goal.feedback
    assert feedback.joints == JOINTS and 0 < feedback.desired[0][0] - HOME[0] < 0.1
    assert np.allclose(feedback.error[0], feedback.desired[0] - feedback.actual[0])
    run(fresh, [goal], 3.0)
    assert goal.outcome.status == SUCCEEDED and goal.outcome.error_code == SUCCESSFUL
    assert np.allclose(fresh.loop.positions()[:7], target, atol=3e-3)


def test_refusals_carry_their_codes_and_say_why(fresh):
    run(fresh, [], 2.5)
    now = fresh.hardware.now
    cases = [
        (dict(names=("fr3_joint1", "elbow")), [[0.0, 0.0]], [1.0], INVALID_JOINTS, "unknown joint names"),
        (dict(names=JOINTS[:2] + JOINTS[:1]), [[0.0] * 3], [1.0], INVALID_JOINTS, "repeat"),
        ({}, [HOME, HOME], [1.0, 0.5], INVALID_GOAL, "must increase strictly"),
        ({}, [HOME + 5.0], [1.0], INVALID_GOAL, "outside the joint limits"),
        (dict(stamp=now - 2.0), [HOME], [1.0], OLD_HEADER_TIMESTAMP, "ended 1.000 s before"),
        (dict(path=[("fr3_joint1", -3.0, 0.0, 0.0)]), [HOME], [1.0], INVALID_GOAL, "expected a positive tolerance"),
    ]
    for extra, points, times, code, words in cases:
        goal = trajectory_goal(fresh, times, points, **extra)
        assert goal.done, extra
        assert (goal.outcome.status, goal.outcome.error_code) == (ABORTED, code), goal.outcome
        assert words in goal.outcome.error_string, goal.outcome
    assert fresh.loop.controller.active_trajectories() == []


def test_a_path_tolerance_broken_aborts_and_holds(fresh):
    goal = trajectory_goal(fresh, [0.02], [HOME + 0.1], path=[(j, 0.005, 0.0, 0.0) for j in JOINTS])
    run(fresh, [goal], 1.0)
    assert (goal.outcome.status, goal.outcome.error_code) == (ABORTED, PATH_TOLERANCE_VIOLATED)
    assert "beyond the tolerance 0.005 rad" in goal.outcome.error_string
    run(fresh, [], 0.5)  # braked to a stop, short of the target, and holding there
    held = fresh.loop.positions()[:7]
    run(fresh, [], 0.5)
    assert np.allclose(fresh.loop.positions()[:7], held, atol=1e-4)
    assert np.max(np.abs(held - (HOME + 0.1))) > 0.01


def test_a_goal_not_reached_in_time_aborts(fresh):
    goal = trajectory_goal(fresh, [0.02], [HOME + 0.1], goal=[(j, 0.001, 0.0, 0.0) for j in JOINTS],
                           goal_time=0.02)
    run(fresh, [goal], 1.0)
    assert (goal.outcome.status, goal.outcome.error_code) == (ABORTED, GOAL_TOLERANCE_VIOLATED)
    assert "0.02 s (goal_time_tolerance)" in goal.outcome.error_string
    # Without a goal time the controller waits as long as it takes, and the same goal succeeds.
    assert fresh.reset()[0]
    goal = trajectory_goal(fresh, [0.02], [HOME + 0.1], goal=[(j, 0.001, 0.0, 0.0) for j in JOINTS])
    run(fresh, [goal], 2.0)
    assert goal.outcome.status == SUCCEEDED


def test_preemption_by_a_goal_or_a_topic_command(fresh):
    first = trajectory_goal(fresh, [2.0], [HOME + 0.2])
    run(fresh, [first], 0.2)
    second = trajectory_goal(fresh, [1.0], [HOME])
    first.preempt()  # what the action server does once the new goal is taken
    assert (first.outcome.status, first.outcome.error_code, first.outcome.error_string) == (
        CANCELED, INVALID_GOAL, PREEMPTED_BY_GOAL)
    run(fresh, [second], 0.2)
    fresh.command_positions("arm", HOME + 0.05, streaming=False)
    run(fresh, [second], 0.1)
    assert (second.outcome.status, second.outcome.error_code) == (CANCELED, INVALID_GOAL)
    assert second.outcome.error_string == "preempted by a command on arm_position_controller/commands"


def test_cancel_and_estop_brake_and_hold(fresh):
    goal = trajectory_goal(fresh, [2.0], [HOME + 0.3])
    run(fresh, [goal], 0.5)
    assert goal.cancel().status == CANCELED
    run(fresh, [], 0.5)
    held = fresh.loop.positions()[:7]
    run(fresh, [], 0.5)
    assert np.allclose(fresh.loop.positions()[:7], held, atol=5e-4)  # the servos settling, no more
    assert 0.01 < held[0] - HOME[0] < 0.25  # stopped on the way
    goal = trajectory_goal(fresh, [2.0], [HOME])
    run(fresh, [goal], 0.3)
    fresh.estop()
    run(fresh, [goal], 0.1)
    assert (goal.outcome.status, goal.outcome.error_code) == (ABORTED, INVALID_GOAL)
    assert goal.outcome.error_string.startswith("stopped by an estop")


def test_a_start_in_the_future_holds_until_then_and_a_subset_holds_the_others(fresh):
    start = fresh.hardware.now + 0.5
    goal = trajectory_goal(fresh, [0.5], [[HOME[3] + 0.2]], names=("fr3_joint4",), stamp=start)
    run(fresh, [goal], 0.4)
    assert not goal.done
    assert np.allclose(fresh.loop.positions()[:7], HOME, atol=1e-3)  # not yet
    run(fresh, [goal], 3.0)
    assert goal.outcome.status == SUCCEEDED
    moved = fresh.loop.positions()[:7]
    assert moved[3] == pytest.approx(HOME[3] + 0.2, abs=3e-3)
    assert np.allclose(np.delete(moved, 3), np.delete(HOME, 3), atol=3e-3)


def test_the_gripper_reaches_its_goal_or_stalls(fresh):
    lo, hi = FR3.grippers[0].opening_range
    goal = GripperGoal(fresh, "gripper", "gripper_controller/gripper_cmd", GripperSettings())
    assert goal.start(0.5 * (lo + hi)) is None
    run(fresh, [goal], 5.0)
    assert goal.outcome.status == SUCCEEDED and goal.state.reached_goal and not goal.state.stalled
    assert goal.state.position == pytest.approx(0.5 * (lo + hi), abs=0.01)
    # Fingers blocked (on an object) short of the goal: measured still, the goal ends stalled.
    for allow, status in ((False, ABORTED), (True, SUCCEEDED)):
        goal = GripperGoal(fresh, "gripper", "gripper_controller/gripper_cmd",
                           GripperSettings(stall_timeout=0.3, allow_stalling=allow))
        goal.start(lo)
        sample = fresh.loop.sample()
        blocked = dict(zip(sample.names, sample.position)) | {j: 0.012 for j in FR3.grippers[0].joints}
        for k in range(100):
            t = fresh.hardware.now + k * TICK
            goal.update(t, JointSample(t, sample.names, [blocked[n] for n in sample.names], sample.velocity,
                                       sample.effort))
            if goal.done:
                break
        assert goal.outcome.status == status and goal.state.stalled and not goal.state.reached_goal
        assert goal.state.position == pytest.approx(0.024) and 0.3 < k * TICK < 0.32
    goal = GripperGoal(fresh, "gripper", "gripper_controller/gripper_cmd", GripperSettings())
    assert goal.start(hi + 1.0).status == ABORTED
    assert "outside the joint limits" in goal.outcome.error_string or "not in [" in goal.outcome.error_string


def test_max_effort_bounds_the_grip_until_the_next_command(fresh):
    spec = FR3.grippers[0]
    lo, hi = spec.opening_range
    model = fresh.hardware.twin.model
    fingers = [model.joint(name).id for name in spec.joints]
    stroke = model.jnt_range[fingers].copy()
    model.jnt_range[fingers, 0] = 0.03  # something 60 mm wide between the fingers: they stop on it
    try:
        grip = {}
        for max_effort in (5.0, 0.0):
            goal = GripperGoal(fresh, "gripper", "gripper_controller/gripper_cmd",
                               GripperSettings(stall_timeout=0.3, allow_stalling=True))
            assert goal.start(lo, max_effort) is None
            run(fresh, [goal], 5.0)
            assert goal.outcome.status == SUCCEEDED and goal.state.stalled, goal.outcome
            grip[max_effort] = goal.state.effort  # the fingers' measured effort (closing: negative)
            assert grip[max_effort] == pytest.approx(fresh.loop.sample().efforts_of(spec.joints).mean(), abs=0.5)
        # Held to 5 N, where the twin's own force squeezes the position servo's way, over 20 N.
        assert grip[5.0] == pytest.approx(-5.0, abs=0.05)
        assert grip[0.0] < -15.0
    finally:
        model.jnt_range[fingers] = stroke
    # More than the gripper's max_force is held to it; a negative or NaN force is refused by name.
    fresh.command_gripper("gripper", [hi], max_effort=10 * spec.max_force)
    assert fresh.loop.controller.gripper_force_limits()[0] == spec.max_force
    for bad in (-1.0, float("nan")):
        goal = GripperGoal(fresh, "gripper", "gripper_controller/gripper_cmd", GripperSettings())
        outcome = goal.start(lo, bad)
        assert outcome.status == ABORTED and outcome.error_code == INVALID_GOAL
        assert "max_effort" in outcome.error_string and "expected 0" in outcome.error_string
    # A topic command goes back to the configured force.
    fresh.command_gripper("gripper", [hi])
    assert np.isnan(fresh.loop.controller.gripper_force_limits()[0])
