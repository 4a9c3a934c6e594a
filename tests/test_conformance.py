"""Conformance: for each robot, driver_node with `backend: sim` and with the vendor backend
(against its protocol peer or SDK stand-in) offers the same interface, and one scripted client
running the same sequence on both sees the same behaviour.

The sequence: enable, home, stream targets to every group, send every group a trajectory, move
every gripper; then the controllers' actions (run_action_sequence: goals that succeed, end with
each error code, are preempted or cancelled, gripper goals); estop (commands are then dropped),
enable, reset. The twin's own topics
(/clock, twin/*, cameras/*) are the only difference in the interface, as the contract says.

Peers: the Franka against franky-sim (the libfranka network protocol, driven by the real
pylibfranka), the xArm7 against our emulator of its controller and ALOHA against two emulated
Dynamixel buses (tests/emulators, each bus a process of its own; both driven by the real SDKs), Flexiv and RB-Y1
against SDK stand-ins checked against the real SDKs' signatures (tests/standins).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest
import yaml

from r2s2r.contract.interface import SIM_ONLY_PREFIXES, driver_interface
from r2s2r.robots import get_robot
from tests.graph import node_interface, qos_of
from tests.ros_helpers import REPO

# A hardware protocol in real time (link timeouts of tens of ms): run alone, never beside another
# test file (make test runs these after the others, one at a time).
pytestmark = pytest.mark.realtime

TOLERANCE = 3e-3  # rad: two Dynamixel ticks; the twin and the other peers land well inside it
GRIPPER_TOLERANCE = 3e-3  # m


@contextlib.contextmanager
def aloha_peer(tmp_path):
    from tests.peers import DynamixelBusProcess
    left = DynamixelBusProcess(tmp_path / "ttyDXL_left").start()
    right = DynamixelBusProcess(tmp_path / "ttyDXL_right")
    try:
        right.start()
        # Each bus answers from a process of its own; on a loaded host it still gets the wide window.
        yield {"aloha.left_port": str(left.link_path), "aloha.right_port": str(right.link_path),
               "aloha.latency_timer_ms": 45, "aloha.link_timeout_s": 0.1}, {}, ()
    finally:
        left.stop()
        right.stop()


@contextlib.contextmanager
def flexiv_peer(tmp_path):
    yield {"flexiv.serial_number": "Rizon4-062468"}, {"R2S2R_STANDIN_SERIAL": "Rizon4-062468"}, \
        (REPO / "tests" / "standins" / "shim",)


@contextlib.contextmanager
def rby1_peer(tmp_path):
    device = tmp_path / "rby1_gripper"  # stands for the UPC's gripper device node
    device.touch()
    yield {"rby1.address": "127.0.0.1:50051", "rby1.gripper_device": str(device)}, \
        {"R2S2R_STANDIN_ADDRESS": "127.0.0.1:50051", "R2S2R_STANDIN_GRIPPER_DEVICE": str(device)}, \
        (REPO / "tests" / "standins" / "shim",)


@contextlib.contextmanager
def franka_peer(tmp_path):
    from tests.peers import FrankySim
    sim = FrankySim("127.0.0.33")
    sim.start()
    try:
        # franky-sim paces itself with sleep: on a busy host its states come up to ~80 ms apart.
        yield {"franka.ip": "127.0.0.33", "franka.realtime": "ignore", "franka.link_timeout_s": 0.08}, {}, ()
    finally:
        sim.stop()


@contextlib.contextmanager
def xarm_peer(tmp_path):
    from tests.peers import XArmEmulatorProcess
    emulator = XArmEmulatorProcess("127.0.0.41").start()
    try:
        yield {"xarm.ip": "127.0.0.41", "xarm.link_timeout_s": 0.1}, {}, ()
    finally:
        emulator.stop()


PEERS = {"aloha": ("aloha", aloha_peer), "xarm7": ("xarm", xarm_peer), "flexiv_rizon4": ("flexiv", flexiv_peer), "rby1": ("rby1", rby1_peer),
         "franka_fr3": ("franka", franka_peer)}


def write_stack(tmp_path, robot: str, backend: str, settings: dict) -> str:
    params = {"backend": backend, "camera_rate_hz": 0.0, **settings}
    stack = {"name": f"conformance_{robot}_{backend}", "nodes": [{
        "name": "driver", "executable": "driver_node",
        "parameters": [f"config/robots/{robot}.yaml", params]}]}
    path = tmp_path / f"{robot}_{backend}.yaml"
    path.write_text(yaml.safe_dump(stack))
    return str(path)


def contract_view(pubs, subs, srvs, actions):
    """The interface without the twin's own topics."""
    keep = lambda name: not any(name.lstrip("/").startswith(p.lstrip("/")) for p in SIM_ONLY_PREFIXES)  # noqa: E731
    return ({n: t for n, t in pubs.items() if keep(n)}, {n: t for n, t in subs.items() if keep(n)}, srvs, actions)


def _link_losses(client) -> int:
    return int(client.diagnostic_values().get("link_losses", 0))


def _link_up(client, timeout: float = 30.0) -> bool:
    return client.wait_for(lambda: client.diagnostic_values().get("link") == "up", timeout)


def attempt(client, act, check) -> bool:
    """act(), then whether check() holds, once the driver's link is up; done again (up to three
    times) when the driver lost its link meanwhile. A loaded host can starve a protocol peer past
    the link timeout: the driver then holds, reconnects and drops what it was doing, as it must on
    a real arm (the link-loss tests check that), and a client waits for the link and sends it
    again. Without a link loss the first answer stands."""
    for _ in range(3):
        _link_up(client)
        losses = _link_losses(client)
        act()
        ok = check()
        if ok or _link_losses(client) == losses:
            return ok
    return False


def run_sequence(client, robot) -> dict:
    """The scripted client: what each step achieved, as booleans comparable across backends."""
    seen = {}
    names = robot.joint_names
    home = robot.home_positions
    limits = robot.limits
    seen["enable"] = client.enable(True).success
    answers = []  # the services' own answers count too
    seen["home"] = attempt(client, lambda: answers.append(client.home().success),
                           lambda: answers[-1] and client.wait_until_at(names, home, TOLERANCE, 30))
    for group in robot.groups:
        idx = [names.index(j) for j in group.joints]
        target = np.clip(home[idx] + 0.1, limits.lower[idx] + 0.01, limits.upper[idx] - 0.01)
        seen[f"stream {group.name}"] = attempt(
            client, lambda g=group, t=target: client.send_positions(g.name, t),
            lambda g=group, t=target: client.wait_until_at(g.joints, t, TOLERANCE, 20))
        seen[f"trajectory {group.name}"] = attempt(
            client, lambda g=group, i=idx: client.send_trajectory(g.name, g.joints, [0.75], [home[i]]),
            lambda g=group, i=idx: client.wait_until_at(g.joints, home[i], TOLERANCE, 20))
    for gripper in robot.grippers:
        lo, hi = gripper.opening_range
        goal = lo + 0.4 * (hi - lo)
        seen[f"gripper {gripper.name}"] = attempt(
            client, lambda g=gripper, goal=goal: client.send_gripper(g.name, goal),
            lambda g=gripper, goal=goal: client.wait_for(
                lambda: abs(client.positions(g.joints).sum() - goal) < GRIPPER_TOLERANCE, 20))
    run_action_sequence(client, robot, seen)
    client.estop(True)
    seen["estop latched"] = client.wait_for(lambda: client.diagnostic_values().get("mode") == "estop", 5)
    group = robot.groups[0]
    idx = [names.index(j) for j in group.joints]
    before = client.positions(group.joints)
    client.send_positions(group.name, np.clip(before + 0.1, limits.lower[idx], limits.upper[idx]))
    time.sleep(1.0)
    seen["estop holds"] = float(np.max(np.abs(client.positions(group.joints) - before))) < TOLERANCE
    client.estop(False)
    seen["enable after estop"] = attempt(client, lambda: answers.append(client.enable(True).success),
                                         lambda: answers[-1] and client.wait_for(
                                             lambda: client.diagnostic_values().get("mode") == "enabled", 5))
    target = np.clip(before + 0.1, limits.lower[idx] + 0.01, limits.upper[idx] - 0.01)
    seen["moves after enable"] = attempt(client, lambda: client.send_positions(group.name, target),
                                         lambda: client.wait_until_at(group.joints, target, TOLERANCE, 20))
    seen["reset"] = attempt(client, lambda: answers.append(client.reset().success),
                            lambda: answers[-1] and client.wait_until_at(names, home, TOLERANCE, 30))
    return seen


SUCCEEDED, CANCELED, ABORTED = 4, 5, 6  # action_msgs/GoalStatus


def run_action_sequence(client, robot, seen: dict) -> None:
    """The controllers' actions, as joint_trajectory_controller and gripper_action_controller serve
    them: every group's goals succeed (names in any order, feedback); on the first group a plan
    sent as MoveIt's trajectory execution sends it succeeds, a goal for one joint holds the others, goals end with each error code, a goal is preempted by a goal
    and by a topic command, and a cancel holds short of the target; every gripper's goal reaches
    its opening."""
    names, home, limits = robot.joint_names, robot.home_positions, robot.limits
    results = []

    def goal_step(send, expect) -> bool:
        return attempt(client, lambda: results.append(send()), lambda: expect(results[-1], *results[-1].result(30)))

    for group in robot.groups:
        idx = [names.index(j) for j in group.joints]
        target = np.clip(home[idx] + 0.1, limits.lower[idx] + 0.01, limits.upper[idx] - 0.01)
        order = list(reversed(range(len(idx))))
        # Out to the target and back home, the names in reverse; the feedback (in the group's joint
        # order) passes the target on the way.
        seen[f"follow {group.name}"] = goal_step(
            lambda g=group, t=target, o=order, i=idx: client.follow_trajectory(
                g.name, [g.joints[k] for k in o], [0.5, 1.0], [t[o], home[i][o]]),
            lambda goal, status, result, g=group, t=target, i=idx: (
                status == SUCCEEDED and result.error_code == 0
                and min(np.abs(np.array(f.desired.positions) - t).max() for f in goal.feedback) < 0.02
                and client.wait_until_at(g.joints, home[i], TOLERANCE, 20)))

    group = robot.groups[0]
    idx = [names.index(j) for j in group.joints]
    start, target = home[idx], np.clip(home[idx] + 0.1, limits.lower[idx] + 0.01, limits.upper[idx] - 0.01)
    joints = group.joints
    follow = client.follow_trajectory

    def ends(status, code, words=""):
        return lambda goal, s, result: (s, result.error_code) == (status, code) and words in result.error_string

    def as_moveit_sends_it():
        """A time-parameterised plan from where the group is (MoveIt's trajectory execution: header
        stamp 0, the current state as the first point at time 0, positions, velocities and
        accelerations at every point, no tolerances): here a minimum-jerk move over 1 s."""
        here = client.positions(joints)
        times = np.linspace(0.0, 1.0, 11)
        s = times / times[-1]
        shape = 10 * s**3 - 15 * s**4 + 6 * s**5
        rate, accel = (30 * s**2 - 60 * s**3 + 30 * s**4) / times[-1], (60 * s - 180 * s**2 + 120 * s**3) / times[-1] ** 2
        span = target - here
        return follow(group.name, joints, times, here + np.outer(shape, span), np.outer(rate, span),
                      np.outer(accel, span))

    seen["a plan as MoveIt executes it"] = goal_step(
        as_moveit_sends_it, lambda goal, status, result: status == SUCCEEDED and result.error_code == 0
        and client.wait_until_at(joints, target, TOLERANCE, 20))
    seen["one joint, the others hold"] = goal_step(
        lambda: follow(group.name, joints[:1], [0.5], [start[:1]]),
        lambda goal, status, result: status == SUCCEEDED and client.wait_until_at(
            joints, np.r_[start[:1], target[1:]], TOLERANCE, 20))
    seen["invalid joints"] = goal_step(lambda: follow(group.name, ("not_a_joint",), [1.0], [[0.0]]),
                                       ends(ABORTED, -2, "unknown joint names"))
    seen["invalid goal"] = goal_step(lambda: follow(group.name, joints, [1.0, 0.5], [start, start]),
                                     ends(ABORTED, -1, "must increase strictly"))
    # Half the clock's age ago, so a 0.1 s trajectory long over: the twin's clock starts at 0 and
    # trails the wall under load, and a fixed offset back could reach 0 or less, which means "start now".
    seen["old header timestamp"] = goal_step(
        lambda: follow(group.name, joints, [0.1], [start], stamp=0.5 * client.joints.stamp),
        ends(ABORTED, -3, "header.stamp"))
    seen["path tolerance violated"] = goal_step(
        # Ten times faster than the arm can go; long enough for state ticks to check it on the way.
        lambda: follow(group.name, joints, [0.1], [target], path_tolerance=[(j, 0.005, 0, 0) for j in joints]),
        ends(ABORTED, -4, "path tolerance broken"))
    seen["goal tolerance violated"] = goal_step(
        lambda: follow(group.name, joints, [0.01], [target], goal_tolerance=[(j, 0.001, 0, 0) for j in joints],
                       goal_time_tolerance=0.02),
        ends(ABORTED, -5, "goal_time_tolerance"))

    def preempted_by_goal():
        first = follow(group.name, joints, [2.0], [target])
        client.wait_for(lambda: first.feedback, 10)
        second = follow(group.name, joints, [0.5], [start])
        return first, second

    seen["preempted by a goal"] = attempt(
        client, lambda: results.append(preempted_by_goal()),
        lambda: ends(CANCELED, -1, "new incoming action")(None, *results[-1][0].result(30))
        and ends(SUCCEEDED, 0)(None, *results[-1][1].result(30)))

    def preempted_by_topic():
        goal = follow(group.name, joints, [2.0], [target])
        client.wait_for(lambda: goal.feedback, 10)
        client.send_positions(group.name, start)
        return goal

    seen["preempted by a topic command"] = goal_step(
        preempted_by_topic, ends(CANCELED, -1, f"preempted by a command on {group.name}_position_controller/commands"))

    def cancelled():
        goal = follow(group.name, joints, [2.0], [target])
        client.wait_for(lambda: len(goal.feedback) > 1 and np.abs(client.positions(joints) - start).max() > 0.01, 10)
        goal.cancel()
        return goal

    def held_short(goal, status, result):
        client.wait_for(lambda: False, 0.5)  # braked to a stop by now
        before = client.positions(joints)
        client.wait_for(lambda: False, 0.3)
        return (status == CANCELED and float(np.abs(client.positions(joints) - before).max()) < TOLERANCE
                and float(np.abs(before - target).max()) > 0.01)

    seen["cancel holds"] = goal_step(cancelled, held_short)
    for gripper in robot.grippers:
        lo, hi = gripper.opening_range
        goal = lo + 0.7 * (hi - lo)
        seen[f"gripper_cmd {gripper.name}"] = goal_step(
            # With a max_effort, as MoveIt sends one: half the gripper's force, each backend its way.
            lambda g=gripper, goal=goal: client.gripper_goal(g.name, goal, max_effort=0.5 * g.max_force),
            lambda handle, status, result, goal=goal: (
                status == SUCCEEDED and result.reached_goal and abs(result.position - goal) < 0.01))


def drive(stack_process, ros_client, stack, robot, pythonpath=(), env=None, name="client"):
    # A DDS participant of its own, made after the run before had stopped (StackProcess.stop
    # checks that): its graph holds only live nodes, and node_interface wants one named driver.
    client = ros_client()
    proc = stack_process(stack, env=env, pythonpath=pythonpath)
    client.wait_for_joint_states(60)
    contract = driver_interface(robot.group_names, [g.name for g in robot.grippers], simulated=False)
    interface = node_interface(client.node, "driver",
                               expect_topics=len(contract.publishers) + len(contract.subscriptions))
    qos = {topic: qos_of(client.node, topic, publisher=True) for topic in ("/joint_states", "/diagnostics")}
    for group in robot.groups:
        assert client.wait_for_subscriber(f"{group.name}_position_controller/commands", timeout=20)
    # Every action server discovered before the sequence starts (on a loaded host discovery trails).
    assert client.prepare_actions(robot.group_names, [g.name for g in robot.grippers], timeout=20)
    seen = run_sequence(client, robot)
    assert proc.proc.poll() is None, proc.output
    return contract_view(*interface), qos, seen, proc


@pytest.mark.parametrize("robot_name", sorted(PEERS))
def test_sim_and_vendor_backend_are_indistinguishable(robot_name, tmp_path, stack_process, ros_client):
    robot = get_robot(robot_name)
    backend, peer = PEERS[robot_name]
    sim_interface, sim_qos, sim_seen, sim_proc = drive(stack_process, ros_client,
                                                       write_stack(tmp_path, robot_name, "sim", {}), robot)
    sim_proc.stop()
    with peer(tmp_path) as (settings, env, pythonpath):
        real_interface, real_qos, real_seen, real_proc = drive(
            stack_process, ros_client, write_stack(tmp_path, robot_name, backend, settings), robot,
            pythonpath=pythonpath, env=env)
        real_proc.stop()
    assert real_interface == sim_interface
    assert real_qos == sim_qos
    # Name the steps that failed (pytest cuts a long dict short) and what the twin's node printed.
    assert all(sim_seen.values()), ([step for step, ok in sim_seen.items() if not ok], sim_proc.output[-3000:])
    assert real_seen == sim_seen, real_proc.output[-3000:]
