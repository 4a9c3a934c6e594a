"""The driver core: one robot's driver, without a ROS graph.

It owns what every user of a robot needs, sim and real alike: the lifecycle (it calls the
backend's ros2_control hooks), the control loop, the estop latch and enable, reconnection with
backoff after a lost link, homing, and a diagnostics snapshot. driver_node is its adapter onto
topics and services; the evaluation engine, the proxy-real cell, validation and replay run the
same object on the twin, so a command meets the same checks wherever it comes from.

Every method is safe to call from the ROS executor's threads while `tick()` runs on the
control thread: state changes happen under `lock`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from r2s2r.contract.types import CommandError, JointSample, StaleCommandError
from r2s2r.hardware.base import Hardware, HardwareError, LinkLost
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.safety import SafetyLimits
from r2s2r.hardware.trajectory import TrajectorySampler
from r2s2r.sim.collision import DEFAULT_MARGIN_M
from r2s2r.sim.scene import Scene

# A trajectory stamped further ahead than this is almost surely on another clock (use_sim_time).
MAX_FUTURE_STAMP_S = 10.0
# Moves the driver plans itself (home) use this fraction of the velocity limits.
HOMING_SPEED = 0.3
RECONNECT_BACKOFF_S = (0.1, 2.0)  # first retry, longest wait between retries
PERIODS_KEPT = 2000  # control-cycle periods kept for the snapshot's percentiles

OK, WARN, ERROR = "ok", "warn", "error"


@dataclass(frozen=True)
class Snapshot:
    """The driver's diagnostics at one moment: a level (ok / warn / error), one line saying why,
    and the facts behind it (strings and numbers, as diagnostic_msgs carries them)."""

    level: str
    message: str
    time: float
    values: dict[str, Any] = field(default_factory=dict)


class Driver:
    """`hardware`: the backend, not yet configured; `control_rate_hz`: the command cycle (the
    robot's by default); `limits`: the safety limits (the datasheet's); `cell`: what the
    collision check models (the twin's scene, or the robot on its table); `log`: where state
    changes are reported (a logging.Logger, or a node's logger: one string a call)."""

    def __init__(self, hardware: Hardware, *, control_rate_hz: float | None = None,
                 limits: SafetyLimits | None = None, cell: Scene | None = None,
                 collision_margin: float = DEFAULT_MARGIN_M, log=None):
        self.hardware = hardware
        self.robot = hardware.robot
        self.simulated = hardware.simulated
        self.limits = limits or SafetyLimits.of(self.robot)
        self.control_rate = control_rate_hz or self.robot.control_rate_hz
        required = hardware.required_control_rate_hz
        if required is not None and abs(self.control_rate - required) > 1e-6:
            raise ValueError(f"control rate {self.control_rate:g} Hz: backend {hardware.backend} plays one "
                             f"setpoint per robot cycle and needs {required:g} Hz")
        self.cell = cell
        self.collision_margin = collision_margin
        self.log = log or logging.getLogger("r2s2r.driver")
        self.lock = threading.RLock()  # the control cycle against the services
        self.loop: ControlLoop | None = None
        self.link_fault = ""  # why the robot is not connected; "" while it is
        self.fault = ""  # the driver itself failed (set by whoever runs tick())
        self.estopped = False
        self.estop_time = float("nan")  # robot time the estop latched
        self.enabled = True
        self.link_losses = 0
        self._backoff = RECONNECT_BACKOFF_S[0]
        self._periods: collections.deque = collections.deque(maxlen=PERIODS_KEPT)
        self._periods_lock = threading.Lock()  # appended by the control thread, read by snapshot()
        self._last_cycle_start: float | None = None
        self._next_cycle: float | None = None  # real hardware: when the next cycle is due (host clock)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Configure and activate. A twin always connects (its errors are raised); a real robot
        that cannot be reached yet is recorded as a link fault, and reconnect() retries it."""
        try:
            self._connect()
        except HardwareError as error:
            if self.simulated:
                raise
            self.link_fault = f"not connected: {error}"
            self.log.error(f"{self.hardware.backend}: {self.link_fault}; retrying")

    def _connect(self) -> None:
        with self.lock:
            self.hardware.on_configure()
            self.hardware.on_activate()
            if self.loop is None:
                self.loop = ControlLoop(self.hardware, self.control_rate, self.limits, cell=self.cell,
                                        collision_margin=self.collision_margin)
                if self.estopped:  # latched while the robot could not be reached
                    self.loop.estop()
            else:
                self.loop.hold_here()  # commands received while the link was down are dropped
            self.link_fault = ""
            self._backoff = RECONNECT_BACKOFF_S[0]

    def reconnect(self) -> bool:
        """One attempt to connect again; on failure the next attempt's wait (`retry_in`) doubles,
        up to RECONNECT_BACKOFF_S[1]."""
        try:
            self._connect()
        except HardwareError as error:
            self._backoff = min(self._backoff * 2, RECONNECT_BACKOFF_S[1])
            self.link_fault = f"not connected: {error}"
            return False
        self.log.info(f"{self.hardware.backend}: connected; holding the measured position")
        return True

    @property
    def retry_in(self) -> float:
        """How long to wait before the next reconnect() (seconds)."""
        return self._backoff

    @property
    def connected(self) -> bool:
        return self.loop is not None and not self.link_fault

    def on_hardware_fault(self, error: HardwareError) -> None:
        """A cycle raised (LinkLost, or a fault the backend cannot ride out): hold, close the link
        through the backend's on_error hook, and reconnect from tick()."""
        with self.lock:
            self.link_losses += 1
            self._last_cycle_start = self._next_cycle = None  # the gap is not a cycle period
            self.link_fault = f"link lost: {error}" if isinstance(error, LinkLost) else f"fault: {error}"
            self.log.error(f"{self.hardware.backend}: {self.link_fault}; holding, reconnecting")
            try:
                self.hardware.on_error(error)
            except Exception as exc:  # the link is already gone; closing it may complain
                self.log.debug(f"on_error after {error}: {exc}")

    def shutdown(self) -> None:
        """Deactivate and close the link (the arm holds, then is released safely). Safe twice."""
        with self.lock:
            try:
                if self.connected:
                    self.hardware.on_deactivate()
            except HardwareError as error:
                self.log.warning(f"deactivate: {error}")
            finally:
                self.hardware.on_cleanup()

    # -- commands: CommandError names what was wrong; the arm holds ----------------------------------
    def accepting(self, what: str) -> ControlLoop:
        """The control loop, if the driver takes commands now; else CommandError: `what` was dropped, and why."""
        reason = None
        if not self.connected:
            reason = f"the robot is not connected ({self.link_fault})"
        elif self.estopped:
            reason = "estop is latched (clear it with ~/enable)"
        elif not self.enabled:
            reason = "output is disabled (~/enable)"
        if reason is None:
            return self.loop
        error = CommandError(f"{what}: dropped, {reason}")
        if self.loop is not None:  # a robot unreachable since start-up has no loop yet
            self.loop.controller.stats.rejected["not_accepting"] += 1
            self.loop.controller.stats.last_error = str(error)
        raise error

    def command_positions(self, group: str, values, what: str = "", streaming: bool = True) -> None:
        """A target for `group`: `streaming` (watched by the watchdog) or held (JointController.command_positions)."""
        loop = self.accepting(what or f"{group} positions")
        loop.controller.command_positions(group, values, self.hardware.now, streaming=streaming)

    def command_gripper(self, gripper: str, values, what: str = "", max_effort: float = 0.0) -> None:
        """An opening for `gripper`, closed with at most `max_effort` N (0: the backend's default)."""
        loop = self.accepting(what or f"{gripper} opening")
        loop.controller.command_gripper(gripper, values, self.hardware.now, max_effort, label=what)

    def command_trajectory(self, group: str, names, stamp: float, times, positions, velocities=None,
                           accelerations=None, what: str = "") -> TrajectorySampler:
        """A trajectory for `group` (joint_trajectory_controller's rules); `what` names where it came
        from in errors and in what a goal it replaces is told. The sampler now driving the group."""
        what = what or f"{group}_controller/joint_trajectory"
        loop = self.accepting(what)
        now = self.hardware.now
        if stamp > now + MAX_FUTURE_STAMP_S:
            raise CommandError(f"{what}: header.stamp {stamp:.3f} s is {stamp - now:.1f} s ahead of the robot "
                               f"clock ({now:.3f} s); expected 0 (start now) or a time on the robot's clock "
                               "(use_sim_time for the twin)")
        times = np.asarray(times, float).ravel()
        if stamp != 0 and times.size and np.isfinite(times[-1]) and stamp + times[-1] < now:
            raise StaleCommandError(
                f"{what}: header.stamp {stamp:.3f} s plus the last time_from_start {times[-1]:.3f} s ended "
                f"{now - stamp - times[-1]:.3f} s before the robot clock's {now:.3f} s; expected 0 (start now) "
                "or a start whose trajectory has not ended yet")
        return loop.controller.command_trajectory(group, names, stamp, times, positions, velocities, accelerations,
                                                  now, label=what)

    def estop(self) -> bool:
        """Latch the stop (brake within the acceleration limits, hold); False if already latched."""
        with self.lock:
            if self.estopped:
                return False
            self.estopped = True
            self.estop_time = self.hardware.now
            if self.loop is not None:
                self.loop.estop()
        self.log.warning("estop: braking to a stop and holding until ~/enable is called with true")
        return True

    def enable(self, on: bool) -> tuple[bool, str]:
        """True: clear the estop latch and take commands again, braking to a stop where the arm
        is first; False: brake and hold, refusing commands."""
        if not self.connected:
            return False, f"the robot is not connected ({self.link_fault})"
        with self.lock:
            try:
                if on:
                    self.hardware.on_activate()
                    self.loop.enable()
                    self.estopped = False
                else:
                    self.loop.controller.brake("a disable (~/enable false)")
                self.enabled = bool(on)
            except HardwareError as error:
                return False, str(error)
        return True, "enabled" if on else "disabled: braking and holding"

    def reset(self) -> tuple[bool, str]:
        """The twin: reset the scene. A real robot is never teleported: clear its faults, then
        drive home."""
        if not self.connected:
            return False, f"the robot is not connected ({self.link_fault})"
        with self.lock:
            try:
                self.hardware.reset()
                self.loop.hold_here()  # from where it stands, not from a setpoint before the fault
            except HardwareError as error:
                return False, str(error)
        if not self.simulated:
            return self.home()
        return True, f"scene reset at t={self.hardware.now:.3f} s"

    def hold_here(self) -> None:
        """Drop every command and hold the measured position (after a teleport of the twin)."""
        with self.lock:
            self.loop.hold_here()

    def home(self) -> tuple[bool, str]:
        """Every group to the robot's home pose, at HOMING_SPEED of the velocity limits."""
        try:
            loop = self.accepting("~/home")
            current = loop.positions()
            for group in self.robot.groups:
                index = [self.robot.joint_names.index(j) for j in group.joints]
                home = np.array([self.robot.home[j] for j in group.joints])
                duration = max(float(np.max(np.abs(home - current[index]) /
                                            (HOMING_SPEED * self.limits.velocity[index]))), 0.5)
                loop.controller.command_trajectory(group.name, group.joints, 0.0, [duration], [home], None, None,
                                                   self.hardware.now, label="~/home")
        except (CommandError, HardwareError) as error:
            return False, str(error)
        return True, "moving home"

    # -- running -------------------------------------------------------------------------------------
    def step(self, until: float) -> JointSample:
        """Simulated hardware: cycle until the twin's clock reaches `until` (as fast as the CPU
        allows); the joint state then."""
        with self.lock:
            self.loop.run_until(until)
            return self.loop.sample()

    def run_real_cycles(self, tick: float) -> JointSample:
        """Real hardware: control cycles at the control rate for one state tick, on a schedule of
        the host clock that carries over from tick to tick (a late cycle is caught up once,
        never in a burst). Raises HardwareError from the backend (on_hardware_fault handles it)."""
        dt = 1.0 / self.control_rate
        if self._next_cycle is None:
            self._next_cycle = time.monotonic()
        end = self._next_cycle + tick
        while self._next_cycle < end - 1e-9:
            now = time.monotonic()
            if self._next_cycle > now:
                time.sleep(self._next_cycle - now)
            elif now - self._next_cycle > 10 * dt:  # late by many cycles: resynchronise
                self._next_cycle = end = now
            start = time.monotonic()
            if self._last_cycle_start is not None:
                with self._periods_lock:
                    self._periods.append(start - self._last_cycle_start)
            self._last_cycle_start = start
            with self.lock:
                self.loop.cycle()
            self._next_cycle += dt
        return self.loop.last_sample

    def tick(self, tick: float, sleep: Callable[[float], None] = time.sleep) -> JointSample | None:
        """One state tick: the cycles of `tick` seconds (the twin's clock or the host's), or, while
        the robot is not connected, one reconnect attempt after the backoff. The joint state
        afterwards, or None when there is none to publish."""
        if not self.connected:
            sleep(self.retry_in)
            self.reconnect()
            return None
        try:
            if self.simulated:
                return self.step(self.hardware.now + tick)
            return self.run_real_cycles(tick)
        except HardwareError as error:
            self.on_hardware_fault(error)
            return None

    # -- diagnostics ---------------------------------------------------------------------------------
    def snapshot(self, extra: dict[str, Any] | None = None) -> Snapshot:
        """What the driver is doing and why, as one plain value."""
        stats = self.loop.controller.stats if self.loop is not None else None
        level, message = OK, "running"
        if self.fault:
            level, message = ERROR, f"fault: {self.fault}"
        elif self.link_fault:
            level, message = ERROR, self.link_fault
        elif self.estopped:
            level, message = WARN, "estop latched: holding position"
        elif not self.enabled:
            level, message = WARN, "disabled: holding position"
        elif stats is not None and stats.last_error:
            level, message = WARN, f"last command rejected: {stats.last_error}"
        elif stats is not None and stats.last_stop_short:
            level, message = WARN, f"last motion stopped short: {stats.last_stop_short}"
        now = self.hardware.now
        values: dict[str, Any] = {
            "robot": self.robot.name, **self.hardware.describe(),
            "mode": "estop" if self.estopped else ("enabled" if self.enabled else "disabled"),
            "estop_latched_at": f"{self.estop_time:.6f}" if self.estopped else "",
            "link": "lost" if self.link_fault else "up", "link_losses": self.link_losses,
            "time": f"{now:.3f}", **(extra or {})}
        if stats is not None:
            safety = self.loop.safety.report()
            values.update({
                "commands_accepted": sum(stats.accepted.values()), "commands_rejected": sum(stats.rejected.values()),
                "last_rejection": stats.last_error, "watchdog_stops": stats.watchdog_stops,
                "stopped_short": stats.stopped_short, "last_stop_short": stats.last_stop_short,
                "last_command_at": f"{stats.last_accepted_time:.6f}",
                "safety_interventions": sum(safety.values()),
                "active_trajectories": ",".join(self.loop.controller.active_trajectories()),
            })
            values.update({f"rejected.{k}": v for k, v in stats.rejected.items()})
            with self._periods_lock:
                periods = np.array(self._periods) * 1e6
            if periods.size:  # how steadily the control loop runs on this host
                values.update({"cycle_period_us.p50": f"{np.percentile(periods, 50):.0f}",
                               "cycle_period_us.p99": f"{np.percentile(periods, 99):.0f}",
                               "cycle_period_us.max": f"{periods.max():.0f}"})
            values.update({f"safety.{k}": v for k, v in safety.items()})
        return Snapshot(level, message, now, values)


def send_script_command(driver: Driver, command) -> None:
    """A command as a recorded episode or a script holds it (`kind` positions (held), streaming,
    gripper or trajectory; `target`, `values`; a trajectory's `names`, `start`, `times`, `velocities`) into
    the driver, as its topic would deliver it. CommandError when the driver refuses it."""
    if command.kind in ("positions", "streaming"):
        driver.command_positions(command.target, command.values, streaming=command.kind == "streaming")
    elif command.kind == "gripper":
        driver.command_gripper(command.target, command.values)
    elif command.kind == "trajectory":
        driver.command_trajectory(command.target, command.names, command.start or 0.0, command.times, command.values,
                                  command.velocities)
    else:
        raise CommandError(f"command of kind {command.kind!r}; expected positions, streaming, gripper or trajectory")
