"""The collision check in the command path (sim.collision, JointController, ControlLoop), for every
registered robot on its stack's table scene: targets that touch the cell or the robot itself are
refused with the bodies named, a motion whose path crosses a fixture stops short of it without
touching it, and a hostile stream of targets anywhere in the joint limits keeps the measured joint
speeds and accelerations within the datasheet limits with no contact at all (issue 21, point 3).
"""

from __future__ import annotations

from dataclasses import replace

import mujoco
import numpy as np
import pytest

from r2s2r.contract.types import CommandError
from r2s2r.hardware.controller import JointController
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.robots import registry
from r2s2r.robots.model import joint_bodies, subtree
from r2s2r.sim.collision import CLEAR, DEFAULT_MARGIN_M, FINGER_DEPTH_M, SELF_MARGIN_M, CollisionGuard
from r2s2r.sim.scene import ObjectSpec, Scene, load_scene
from tests.backend_helpers import hostile_round, send_to_controller
from tests.test_twin_servos import SPEED_TOLERANCE

ROBOTS = sorted(registry())
SWEEP = 1.0  # rad, of the first joint in the stop-short test


def stack_scene_path(name: str) -> str:
    """The scene file the robot's sim stack runs (config/scenes/<robot>_table.yaml)."""
    return "config/scenes/franka_table.yaml" if name == "franka_fr3" else f"config/scenes/{name}_table.yaml"


def stack_scene(name: str) -> Scene:
    """The scene the robot's sim stack runs (a variant's: the revised robot's, with the variant in it)."""
    revises = registry()[name].variant_of
    return replace(load_scene(stack_scene_path(revises)), robot=name) if revises else load_scene(stack_scene_path(name))


def robot_contacts(twin, robot, exclude_objects: bool = True) -> list[tuple[str, str, float]]:
    """Contacts (bodies, depth) in the twin's physics between the robot and anything but a free object."""
    m, d = twin.model, twin.data
    on_robot = subtree(m, [m.body(robot.base_link).id])
    objects = {m.body(name).id for name in twin.object_names} if exclude_objects else set()
    found = []
    for c in d.contact[:d.ncon]:
        b1, b2 = m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]
        if c.dist < 0 and (on_robot[b1] or on_robot[b2]) and not ({b1, b2} & objects):
            found.append((m.body(b1).name, m.body(b2).name, float(c.dist)))
    return found


def table_pose(robot, guard, rng, index) -> np.ndarray:
    """A pose within the joint limits that puts one of the robot's links on the table: the joints
    `index` anywhere, the others at home."""
    for _ in range(5000):
        q = robot.home_positions.copy()
        q[index] = rng.uniform(robot.limits.lower[index], robot.limits.upper[index])
        found = guard.clearance(q)
        if found.other == "table" and found.distance < 0:
            return q
    raise AssertionError(f"{robot.name}: no pose in 5000 touches the table")


@pytest.mark.parametrize("name", ("franka_fr3", "aloha"))
def test_what_a_measured_pose_touches_is_named_with_its_kind(name):
    """CollisionGuard.contact, as the DDS test reads measured poses: nothing at home; a finger on
    the table or the robot is "finger", two hands "hands" (touches slow motion may make), anything
    else "link", which the guard refuses even slowly."""
    robot = registry()[name]
    guard = CollisionGuard(robot, stack_scene(name))
    openings = [g.opening_range[1] for g in robot.grippers]
    assert guard.contact(robot.home_positions, openings) == (CLEAR, "")
    fingers = {guard.model.body(b).name for b in joint_bodies(guard.model, robot.gripper_joint_names)}
    rng = np.random.default_rng(5)
    found = {}
    for _ in range(20000):
        q = rng.uniform(robot.limits.lower, robot.limits.upper)
        where, kind = guard.contact(q, openings)
        assert (kind == "") == where.clear and (where.clear or where.distance < 0), (kind, where)
        found.setdefault(kind, (q, where))
        if len(found) == (4 if len(robot.grippers) > 1 else 3):
            break
    assert set(found) == ({"", "link", "finger", "hands"} if len(robot.grippers) > 1 else {"", "link", "finger"}), \
        sorted(found)
    q, where = found["link"]
    assert not guard.clearance(q, openings, slow=True).clear
    assert where.robot_body not in fingers and where.other.split(" ")[0] not in fingers, where
    q, where = found["finger"]
    assert where.robot_body in fingers or where.other.split(" ")[0] in fingers, where


@pytest.mark.parametrize("name", ROBOTS)
def test_targets_that_touch_the_cell_or_the_robot_are_refused_and_change_nothing(name):
    robot = registry()[name]
    hw = SimHardware(stack_scene(name))
    hw.on_configure()
    loop = ControlLoop(hw)
    controller = loop.controller
    group = next(g for g in robot.groups if g.tcp is not None)
    index = [robot.joint_names.index(j) for j in group.joints]
    on_table = table_pose(robot, loop.guard, np.random.default_rng(3), index)
    before = controller.groups[group.name].target.copy()
    rejected = sum(controller.stats.rejected.values())
    with pytest.raises(CommandError) as error:
        controller.command_positions(group.name, on_table[index], hw.now)
    message = str(error.value)
    assert "mm into table" in message and f"{DEFAULT_MARGIN_M * 1000:.0f} mm clear" in message, message
    assert np.array_equal(controller.groups[group.name].target, before)
    assert sum(controller.stats.rejected.values()) == rejected + 1
    # The same pose as the second point of a trajectory: refused, the point named.
    here = controller.limiter.position[index]
    with pytest.raises(CommandError, match="point 1: the target puts"):
        controller.command_trajectory(group.name, group.joints, 0.0, [1.0, 2.0], [here, on_table[index]], None, None,
                                      hw.now)
    # Home is clear: taken.
    controller.command_positions(group.name, robot.home_positions[index], hw.now)


def test_a_gripper_opening_into_the_robot_is_refused_and_closing_is_taken():
    """Fingers travel at their gripper's speed: an opening that would put one into a link (here one
    of ALOHA's arms folded against its own fingers; in a DDS test, one hand opening into the other)
    is refused by name and changes nothing, and closing away from the contact is taken."""
    robot = registry()["aloha"]
    guard = CollisionGuard(robot, stack_scene("aloha"))
    (left_open, _), (closed, wide) = robot.grippers[0].opening_range[::-1], robot.grippers[1].opening_range
    rng = np.random.default_rng(0)
    for _ in range(20000):  # a pose where the right fingers are clear closed and in contact wide open
        q = rng.uniform(robot.limits.lower, robot.limits.upper)
        if guard.clearance(q, [left_open, closed], slow=False).clear and \
                not guard.clearance(q, [left_open, wide], slow=False).clear:
            break
    else:
        raise AssertionError("no pose in 20000 where opening the right gripper touches the robot")
    controller = JointController(robot, q, guard=guard)
    controller.command_gripper("left_gripper", [left_open])
    controller.command_gripper("right_gripper", [closed])  # closing: the fingers move away
    with pytest.raises(CommandError, match=r"right_gripper_controller/commands: the opening puts right_\w+_finger"
                                           r"_link .* expected fingers that stay"):
        controller.command_gripper("right_gripper", [wide])
    assert controller.gripper_openings()[1] == closed and controller.stats.rejected["right_gripper"] == 1
    controller.command_gripper("right_gripper", [closed + 0.001])


def test_a_gripper_whose_fingers_would_sweep_through_a_link_is_refused_though_both_ends_are_clear():
    robot = registry()["aloha"]
    guard = CollisionGuard(robot, stack_scene("aloha"))
    closed, wide = robot.grippers[1].opening_range
    rng = np.random.default_rng(0)

    def clear(q, opening):
        return guard.clearance(q, [wide, opening], slow=False, margin=SELF_MARGIN_M).clear
    for _ in range(60000):  # a pose where the right fingers pass something halfway open
        q = rng.uniform(robot.limits.lower, robot.limits.upper)
        if clear(q, closed) and clear(q, wide) and not clear(q, (closed + wide) / 2):
            break
    else:
        raise AssertionError("no pose in 60000 where the right fingers pass something on the way")
    assert guard.opening_error("right", q, [wide, closed], [wide, closed]) == ""
    assert "right: the opening puts right_" in guard.opening_error("right", q, [wide, closed], [wide, wide])


def sweep_with_a_wall(robot):
    """(scene, group, start, target): sweeping the first joint of the first group with a tool
    point by SWEEP rad from home, with a fixed 4 cm box where the tool point is halfway."""
    group = next(g for g in robot.groups if g.tcp is not None)
    joint = robot.joint_names.index(group.joints[0])
    start = robot.home_positions.copy()
    plain = CollisionGuard(robot, stack_scene(robot.name))
    for sign in (1.0, -1.0):  # the direction whose end is clear of the table and the robot
        target = start.copy()
        target[joint] += sign * SWEEP
        if robot.limits.lower[joint] <= target[joint] <= robot.limits.upper[joint] and plain.clearance(target).clear:
            break
    probe = SimHardware(stack_scene(robot.name))
    probe.on_configure()
    m, d = probe.twin.model, probe.twin.data
    d.qpos[probe.twin._arm_qpos] = (start + target) / 2
    mujoco.mj_kinematics(m, d)
    wall_at = d.site(f"{group.name}_tcp").xpos.copy()
    wall = ObjectSpec(name="wall", shape="box", size=(0.04, 0.04, 0.04), pos=tuple(wall_at), fixed=True,
                      rgba=(0.2, 0.7, 0.2, 1.0))
    scene = stack_scene(robot.name)
    return scene.with_objects(scene.objects + (wall,)), group, start, target


@pytest.mark.parametrize("name", ROBOTS)
def test_a_motion_through_a_fixture_stops_short_of_it_and_can_back_away(name):
    robot = registry()[name]
    scene, group, start, target = sweep_with_a_wall(robot)
    guard = CollisionGuard(robot, scene)
    assert guard.clearance(start).clear and guard.clearance(target).clear, "the sweep's ends must be clear"
    hw = SimHardware(scene)
    hw.on_configure()
    loop = ControlLoop(hw)
    index = [robot.joint_names.index(j) for j in group.joints]
    loop.controller.command_positions(group.name, target[index], hw.now)
    touching, setpoints = [], []
    for _ in range(int(round(4.0 / loop.dt))):
        loop.cycle()
        touching += [c for c in robot_contacts(hw.twin, robot) if "wall" in c[:2]]
        setpoints.append(loop.controller.limiter.position.copy())
    assert not touching, f"{name}: the arm touched the wall: {touching[:3]}"
    stats = loop.controller.stats
    assert stats.stopped_short >= 1 and "wall" in stats.last_stop_short, stats
    joint = index[0]
    travelled = (setpoints[-1][joint] - start[joint]) / (target[joint] - start[joint])
    assert 0.05 < travelled < 0.5, f"{name}: stopped at {travelled:.2f} of the sweep, expected short of the wall"
    assert np.array_equal(setpoints[-1], setpoints[-int(0.5 / loop.dt)]), "the setpoints rest where the motion stopped"
    # Away from the wall is always allowed.
    loop.controller.command_positions(group.name, start[index], hw.now)
    loop.run_until(hw.now + 3.0)
    assert np.allclose(loop.controller.limiter.position[index], start[index], atol=1e-4)


@pytest.mark.parametrize("name", ROBOTS)
def test_hostile_targets_anywhere_in_the_limits_touch_nothing_and_keep_the_limits(name):
    """The issue's scenario in-process: the robot's stack scene (its table and objects), valid
    targets anywhere in the joint limits among invalid ones for 2.5 s, then silence. Measured from the joint
    samples at the state rate: no contact of the robot with the cell or itself, speeds within the
    servo tolerance of the datasheet, accelerations within the spec."""
    robot = registry()[name]
    hw = SimHardware(stack_scene(name))
    hw.on_configure()
    loop = ControlLoop(hw)
    rng = np.random.default_rng(ROBOTS.index(name))
    every = max(1, int(round(loop.rate_hz / robot.state_rate_hz)))
    per_round = max(1, int(round(0.01 / loop.dt)))  # a round of commands every 10 ms
    stamps, positions, velocities, touching = [], [], [], []
    taken = 0
    # At rest after the watchdog (0.5 s), the slowest joint's stopping time and the servos' settling (0.5 s).
    rest_at = 2.5 + 0.5 + float(np.max(loop.limits.velocity / loop.limits.acceleration)) + 0.5
    while hw.now < rest_at + 0.3:
        if hw.now < 2.5 and loop.cycles % per_round == 0:  # trajectories in the first half: it ends streaming
            commands = hostile_round(robot, rng, trajectories=hw.now < 1.25)
            taken += sum(send_to_controller(loop.controller, c, hw.now) is None for c in commands)
        loop.cycle()
        if loop.cycles % every == 0:
            sample = hw.read()
            stamps.append(sample.stamp)
            n = len(robot.joint_names)  # a sample holds the arm joints first, in robot order
            positions.append(sample.position[:n])
            velocities.append(sample.velocity[:n])
            touching += robot_contacts(hw.twin, robot)
    stamps, positions, velocities = np.array(stamps), np.array(positions), np.array(velocities)
    limits = robot.limits
    speed = np.abs(np.diff(positions, axis=0) / np.diff(stamps)[:, None]).max(axis=0) / limits.velocity
    reported = np.abs(velocities).max(axis=0) / limits.velocity
    acceleration = np.abs(np.diff(velocities, axis=0) / np.diff(stamps)[:, None]).max(axis=0) / limits.acceleration
    report = (f"{name}: {taken} commands taken, {loop.controller.stats.stopped_short} stops short; speed "
              f"{speed.max():.3f} / {reported.max():.3f} (reported), acceleration {acceleration.max():.3f} of the limits")
    print(report)
    assert taken > 20, report
    assert not touching, f"{report}; contacts: {sorted(set(touching))[:5]}"
    assert np.all(speed <= 1 + SPEED_TOLERANCE) and np.all(reported <= 1 + SPEED_TOLERANCE), report
    assert np.all(acceleration <= 1.0), report
    assert np.ptp(positions[stamps > rest_at], axis=0).max() < 1e-4, f"{report}: not at rest after the silence"


def test_a_hand_resting_near_the_table_moves_away_as_fast_as_the_limits_allow():
    """Slowly a finger may come within the margin of the table; at speed the fingers keep the
    margins, but only as far as they are clear where the motion starts: lifting the arm away
    (here its shoulder, 0.6 rad) runs as fast as the limits allow, without a stop short."""
    robot = registry()["franka_fr3"]
    hw = SimHardware(stack_scene("franka_fr3"))
    hw.on_configure()
    loop = ControlLoop(hw)
    resting = np.array([0.561, 0.904, -0.507, -1.720, -0.300, 2.391, -0.277])  # a finger 8.5 mm above the table
    openings = loop.controller.gripper_openings()
    assert loop.guard.clearance(resting, openings).clear
    near = loop.guard.clearance(resting, openings, slow=False)
    assert near.other == "table" and "finger" in near.robot_body and 0 < near.distance < DEFAULT_MARGIN_M, near
    lim = loop.limits
    controller = JointController(robot, resting, velocity=lim.velocity, acceleration=lim.acceleration,
                                 lower=lim.lower, upper=lim.upper, guard=loop.guard)
    lifted = resting.copy()
    lifted[1] -= 0.6
    controller.command_positions("arm", lifted)
    speeds = []
    for i in range(int(1.0 / loop.dt)):
        before = controller.limiter.position.copy()
        controller.update(i * loop.dt, loop.dt)
        speeds.append(abs(controller.limiter.position[1] - before[1]) / loop.dt)
    assert controller.stats.stopped_short == 0, controller.stats.last_stop_short
    # The time-optimal profile's peak: full speed, or where accelerating meets braking.
    assert max(speeds) > 0.9 * min(lim.velocity[1], np.sqrt(0.6 * lim.acceleration[1]))
    np.testing.assert_allclose(controller.limiter.position, lifted, atol=1e-9)


def test_a_finger_touching_the_table_is_not_driven_into_it_at_speed():
    """Slowly a finger may touch the table (up to FINGER_DEPTH_M deep); a motion from there that
    presses it deeper stops short, fast or slow, however far below the target lies."""
    robot = registry()["franka_fr3"]
    hw = SimHardware(stack_scene("franka_fr3"))
    hw.on_configure()
    loop = ControlLoop(hw)
    guard, openings, lim = loop.guard, loop.controller.gripper_openings(), loop.limits
    resting = np.array([0.561, 0.904, -0.507, -1.720, -0.300, 2.391, -0.277])

    def depth(pose) -> float:
        return guard.clearance(pose, openings, slow=False).distance
    low, high = 0.0, 0.3  # the shoulder lowered by `low` leaves the finger above the table, by `high` in it
    for _ in range(40):
        mid = (low + high) / 2
        pose = resting.copy()
        pose[1] += mid
        low, high = (mid, high) if depth(pose) > -0.001 else (low, mid)
    touching = resting.copy()
    touching[1] += low
    assert -0.002 < depth(touching) < 0 and guard.clearance(touching, openings).clear
    controller = JointController(robot, touching, velocity=lim.velocity, acceleration=lim.acceleration,
                                 lower=lim.lower, upper=lim.upper, guard=guard)
    deeper = touching.copy()
    deeper[1] += 0.3
    # A target below the table, as one taken while the arm was elsewhere would be (command_positions
    # refuses it here): the motion check alone stands between the finger and the table.
    controller.groups["arm"].target = deeper
    deepest = 0.0
    for i in range(int(1.0 / loop.dt)):
        controller.update(i * loop.dt, loop.dt)
        deepest = min(deepest, depth(controller.limiter.position))
    assert controller.stats.stopped_short > 0
    assert deepest > -FINGER_DEPTH_M - 1e-3, f"the finger went {-deepest * 1000:.1f} mm into the table"
