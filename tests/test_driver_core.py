"""The driver core (hardware.driver.Driver) without a ROS graph: the lifecycle hooks it calls,
a robot unreachable at start-up, commands while disconnected, a lost link and the reconnection
with backoff, the estop latch and enable, homing, and the diagnostics snapshot; then the same
core stepping the twin."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.contract import CommandError, JointSample, StaleCommandError
from r2s2r.hardware.base import Hardware, HardwareError, Lifecycle, LinkLost
from r2s2r.hardware.driver import ERROR, OK, RECONNECT_BACKOFF_S, WARN, Driver
from r2s2r.hardware.sim import SimHardware
from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene

FR3 = get_robot("franka_fr3")
TICK = 0.01  # one state tick: ten control cycles at the FR3's 1 kHz


class ScriptedArm(Hardware):
    """A real (host-clocked) backend that follows its setpoints exactly, records the lifecycle
    hooks the driver calls, and fails when told to: `unreachable` connection attempts, then a
    lost link at the next read once `lose_link` is set."""

    backend = "scripted"

    def __init__(self, unreachable: int = 0):
        super().__init__(FR3)
        self.unreachable = unreachable
        self.lose_link = False
        self.hooks: list[str] = []
        self.position = FR3.home_positions.copy()
        self.writes = 0

    def on_configure(self):
        self.hooks.append("configure")
        if self.unreachable:
            self.unreachable -= 1
            raise HardwareError("no answer from 192.0.2.1")
        self.state = Lifecycle.INACTIVE

    def on_activate(self):
        self.hooks.append("activate")
        super().on_activate()

    def on_deactivate(self):
        self.hooks.append("deactivate")
        super().on_deactivate()

    def on_error(self, error):
        self.hooks.append("error")
        super().on_error(error)

    def on_cleanup(self):
        self.hooks.append("cleanup")
        self.state = Lifecycle.FINALIZED

    def reset(self):
        self.hooks.append("reset")

    def read(self) -> JointSample:
        if self.lose_link:
            self.lose_link = False
            raise LinkLost("scripted: no state for 60 ms")
        names = FR3.joint_names + FR3.gripper_joint_names
        fingers = np.full(len(FR3.gripper_joint_names), 0.02)
        position = np.concatenate([self.position, fingers])
        return JointSample(self.now, tuple(names), position, np.zeros(len(names)), np.zeros(len(names)))

    def write(self, command, gripper_openings, gripper_forces=None):
        self.position = np.array(command.position)
        self.writes += 1


def _arm_target(driver: Driver) -> np.ndarray:
    return driver.loop.controller.groups["arm"].target.copy()


def test_a_robot_unreachable_at_start_refuses_commands_then_connects_with_backoff():
    arm = ScriptedArm(unreachable=3)
    driver = Driver(arm)
    driver.start()  # no exception: a real robot that is not there yet is retried
    assert not driver.connected and driver.loop is None
    assert driver.link_fault == "not connected: no answer from 192.0.2.1"
    with pytest.raises(CommandError, match=r"arm positions: dropped, the robot is not connected \(not connected: "
                                           "no answer from 192.0.2.1\\)"):
        driver.command_positions("arm", FR3.home_positions)
    assert driver.reset() == (False, "the robot is not connected (not connected: no answer from 192.0.2.1)")
    assert driver.enable(True)[0] is False
    assert driver.home()[0] is False
    snapshot = driver.snapshot()
    assert (snapshot.level, snapshot.values["link"]) == (ERROR, "lost")
    assert "no answer" in snapshot.message

    assert driver.estop()  # latched while unreachable: the loop starts latched
    waits = []
    for _ in range(2):
        assert driver.tick(TICK, sleep=waits.append) is None
    assert waits == [RECONNECT_BACKOFF_S[0], 2 * RECONNECT_BACKOFF_S[0]]  # doubling backoff
    assert driver.tick(TICK, sleep=waits.append) is None  # the third attempt connects
    assert driver.connected and driver.retry_in == RECONNECT_BACKOFF_S[0]
    assert arm.hooks == ["configure"] * 4 + ["activate"]
    with pytest.raises(CommandError, match="estop is latched"):
        driver.command_positions("arm", FR3.home_positions)
    assert driver.enable(True) == (True, "enabled")
    driver.command_positions("arm", FR3.home_positions + 0.01)
    assert driver.tick(TICK) is not None
    snapshot = driver.snapshot()
    assert (snapshot.level, snapshot.values["mode"], snapshot.values["link"]) == (WARN, "enabled", "up")
    assert snapshot.message.startswith("last command rejected: arm positions: dropped, estop is latched")


def test_a_lost_link_holds_closes_through_on_error_and_reconnects_holding_where_the_arm_stands():
    arm = ScriptedArm()
    driver = Driver(arm)
    driver.start()
    assert arm.state is Lifecycle.ACTIVE
    driver.command_trajectory("arm", FR3.joint_names, 0.0, [5.0], [FR3.home_positions + 0.3])
    assert driver.tick(TICK) is not None and arm.writes >= 9
    assert driver.loop.controller.active_trajectories() == ["arm"]
    arm.lose_link = True
    assert driver.tick(TICK) is None  # the cycle raised: the driver holds and reports
    assert (driver.link_losses, arm.state) == (1, Lifecycle.ERROR)
    assert arm.hooks[-2:] == ["error", "cleanup"]
    assert driver.link_fault == "link lost: scripted: no state for 60 ms"
    with pytest.raises(CommandError, match="dropped, the robot is not connected \\(link lost"):
        driver.command_positions("arm", FR3.home_positions)
    writes = arm.writes
    assert driver.tick(TICK, sleep=lambda s: None) is None  # reconnects; nothing written while down
    assert arm.writes == writes and driver.connected
    held = arm.position.copy()
    assert driver.loop.controller.active_trajectories() == []  # the trajectory was dropped
    assert np.allclose(_arm_target(driver), held)
    driver.tick(TICK)
    assert np.allclose(arm.position, held)  # holding where it stood at the reconnection
    snapshot = driver.snapshot()
    assert (snapshot.level, snapshot.values["link_losses"]) == (WARN, 1)  # the refused command above


def test_estop_brakes_and_latches_enable_clears_it_and_disable_refuses_commands():
    arm = ScriptedArm()
    driver = Driver(arm)
    driver.start()
    driver.command_trajectory("arm", FR3.joint_names, 0.0, [2.0], [FR3.home_positions + 0.5])
    for _ in range(20):
        driver.tick(TICK)
    assert driver.estop() and not driver.estop()  # a second estop changes nothing
    stopped = None
    for _ in range(100):  # braking within the acceleration limits, then still
        driver.tick(TICK)
        if stopped is not None and np.array_equal(arm.position, stopped):
            break
        stopped = arm.position.copy()
    else:
        pytest.fail("the arm did not come to rest after the estop")
    snapshot = driver.snapshot()
    assert (snapshot.level, snapshot.values["mode"]) == (WARN, "estop")
    with pytest.raises(CommandError, match="estop is latched \\(clear it with ~/enable\\)"):
        driver.command_gripper("hand", [0.04])
    assert driver.enable(True) == (True, "enabled") and not driver.estopped
    driver.command_positions("arm", stopped[:7])
    assert driver.enable(False) == (True, "disabled: braking and holding")
    with pytest.raises(CommandError, match="output is disabled"):
        driver.command_positions("arm", stopped[:7])
    assert driver.snapshot().message == "disabled: holding position"
    rejected = driver.snapshot().values["rejected.not_accepting"]
    assert rejected == 2


def test_home_and_shutdown_call_the_hooks_in_order():
    arm = ScriptedArm()
    driver = Driver(arm)
    driver.start()
    assert driver.snapshot().level == OK
    arm.position = FR3.home_positions + 0.2
    driver.loop.hold_here()
    assert driver.home() == (True, "moving home")
    assert driver.loop.controller.active_trajectories() == ["arm"]
    driver.shutdown()
    driver.shutdown()  # safe twice
    assert arm.hooks == ["configure", "activate", "deactivate", "cleanup", "deactivate", "cleanup"]
    assert arm.state is Lifecycle.FINALIZED


def test_a_control_rate_the_backend_cannot_play_is_refused_by_name():
    class OnePerCycle(ScriptedArm):
        required_control_rate_hz = 1000.0
    with pytest.raises(ValueError, match="control rate 500 Hz: backend scripted plays one setpoint per robot cycle "
                                         "and needs 1000 Hz"):
        Driver(OnePerCycle(), control_rate_hz=500.0)


def test_the_core_steps_the_twin_and_refuses_bad_commands_while_the_arm_holds():
    driver = Driver(SimHardware(Scene(robot="franka_fr3"), seed=0))
    driver.start()
    start = driver.step(0.1).positions_of(FR3.joint_names).copy()
    assert driver.hardware.now == pytest.approx(0.1)
    with pytest.raises(CommandError, match="outside the joint limits"):
        driver.command_positions("arm", FR3.home_positions + 10.0)
    with pytest.raises(CommandError, match="ahead of the robot clock"):
        driver.command_trajectory("arm", FR3.joint_names, 100.0, [1.0], [FR3.home_positions])
    # A stamp before the clock's zero (a real robot's clock starts at boot) is a time long over, not "now".
    with pytest.raises(StaleCommandError, match="ended"):
        driver.command_trajectory("arm", FR3.joint_names, -5.0, [1.0], [FR3.home_positions])
    held = driver.step(0.3).positions_of(FR3.joint_names)
    assert np.max(np.abs(held - start)) < 1e-3
    assert driver.reset()[0] and driver.hardware.now == 0.0
    driver.shutdown()
    assert driver.hardware.twin is None
