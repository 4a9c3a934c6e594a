"""Flexiv Rizon 4 through Flexiv RDK's Python API, flexivrdk 1.9.4.1 (the 1.9 line drives the
Rizon series; RDK 2.x is for Flexiv's Enlight robots and has another API).

The Python RDK has no real-time modes, so the arm streams in `Mode.NRT_JOINT_POSITION`: every
`1 / command_rate_hz` the newest setpoint goes out through `Robot.SendJointPosition`, and the
robot's own motion generator tracks it within the URDF velocity and the spec's acceleration
limits. State comes from `Robot.states()` (non-blocking; the RDK refreshes it at 1 kHz): when its
timestamp stops changing for `link_timeout_s` (time the host did not run us is not counted:
hardware._link), or `Robot.connected()` turns false, the link is lost. The gripper (a device configured in Flexiv Elements, by name) moves through
`Gripper.Move`, which blocks until delivered, so it runs on a worker thread.

A fault (`Robot.fault()`, or the robot refusing setpoints) puts the backend in ERROR: nothing
is streamed, the robot holds, describe() says why, and reset() (~/reset) clears it.

Joint order: the RDK's joint vector is joint1..joint7, the robot spec's order; external axes,
which would come first, are refused.
"""

from __future__ import annotations

import ipaddress
import math
import re
import sys
import time
from typing import Any, Mapping

import numpy as np

from r2s2r.config import ConfigError, Section
from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware._link import SilenceClock
from r2s2r.hardware._worker import LatestWorker
from r2s2r.hardware.base import Hardware, HardwareError, Lifecycle, LinkLost, grip_force
from r2s2r.robots import RobotSpec

RDK_PACKAGE = "flexivrdk"
RDK_VERSION = "1.9.4.1"
RDK_PYTHONS = ("3.10", "3.12", "3.14")  # the CPython versions flexivrdk 1.9.4.1 has wheels for
ARM_DOF = 7
SETTINGS_SOURCE = "driver parameters"
# The RDK accepts "Rizon 4s-123456" and "Rizon4s-123456": a model name, a dash, the number.
SERIAL_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9 ]*-[A-Za-z0-9]+")
GRIPPER_DEADBAND_M = 1e-4  # openings closer than this to the last one sent are not re-sent

# What keeps the arm from becoming operational, and what to do about it.
_NOT_OPERATIONAL_HINTS = {
    "BOOTING": "the robot is still booting; wait and retry",
    "ESTOP_NOT_RELEASED": "release the E-stop",
    "NOT_ENABLED": "the robot did not enable; check Flexiv Elements for the reason",
    "RELEASING_BRAKE": "the brakes are still releasing; retry",
    "MINOR_FAULT": "clear the fault with ~/reset",
    "CRITICAL_FAULT": "clear the fault with ~/reset (a critical fault may need a power cycle)",
    "IN_REDUCED_STATE": "the robot is in reduced state (safety input low or TCP past a safety plane)",
    "IN_RECOVERY_STATE": "a joint is past its limit; recover it from Flexiv Elements first",
    "IN_MANUAL_MODE": "switch the robot to Auto (Remote) mode on the teach pendant",
}


class FlexivHardware(Hardware):
    backend = "flexiv"

    def __init__(self, robot: RobotSpec, settings: Mapping[str, Any] | None = None):
        super().__init__(robot, settings)
        if len(robot.joint_names) != ARM_DOF or len(robot.grippers) > 1:
            raise HardwareError(f"backend flexiv drives a 7-joint arm with at most one gripper; robot {robot.name} "
                                f"has {len(robot.joint_names)} joints and {len(robot.grippers)} grippers")
        try:
            self._read_settings(Section(self.settings, SETTINGS_SOURCE, self.backend))
        except ConfigError as error:
            raise HardwareError(str(error)) from None
        limits = robot.limits
        self._max_vel = [float(v) for v in limits.velocity]
        self._max_acc = [float(a) for a in limits.acceleration]
        self._names = robot.joint_names + robot.gripper_joint_names
        self._rdk: Any = None
        self._robot: Any = None
        self._gripper: Any = None
        self._gripper_worker: LatestWorker | None = None
        self._gripper_speed = self._gripper_force = 0.0
        self._gripper_range = (0.0, 0.0)
        self._facts: dict[str, Any] = {}
        self._last_stamp: tuple | None = None
        self._silence = SilenceClock(self.link_timeout_s, 0.0)
        self._sent_at = -math.inf
        self._sent_opening = self._sent_force = math.nan
        self._resume_after_reset = False  # streaming was on when the fault struck
        self._lost = False  # the link dropped: everything raises LinkLost until on_configure()
        self._last_error = ""  # the last request the robot refused, for diagnostics

    def _read_settings(self, s: Section) -> None:
        s.reject_unknown({"serial_number", "network_interface_whitelist", "gripper_name",
                          "command_rate_hz", "operational_timeout_s"})
        self.serial_number = s.raw("serial_number", "")
        if not isinstance(self.serial_number, str) or not SERIAL_PATTERN.fullmatch(self.serial_number):
            raise s.error("serial_number", "the robot's serial number as Flexiv Elements shows it, "
                          "e.g. 'Rizon4-123456' or 'Rizon 4s-123456'", self.serial_number)
        self.whitelist = self._whitelist(s)
        self.gripper_name = s.raw("gripper_name", "Robotiq-2F-85")
        if not isinstance(self.gripper_name, str):
            raise s.error("gripper_name", "the gripper's device name in Flexiv Elements, or '' for none",
                          self.gripper_name)
        self.command_rate_hz = s.number("command_rate_hz", 100.0, minimum=1.0, maximum=1000.0)
        self.operational_timeout_s = s.number("operational_timeout_s", 10.0, positive=True)
        if self.gripper_name and not self.robot.grippers:
            raise s.error("gripper_name", f"'' (robot {self.robot.name} has no gripper)", self.gripper_name)

    @staticmethod
    def _whitelist(s: Section) -> list[str]:
        value = s.raw("network_interface_whitelist", "")
        if not isinstance(value, str):
            raise s.error("network_interface_whitelist", "a comma-separated string of this PC's IPv4 "
                          "addresses to search the robot through, or '' for all interfaces", value)
        addresses = [a.strip() for a in value.split(",") if a.strip()]
        for address in addresses:
            try:
                ipaddress.IPv4Address(address)
            except ValueError:
                raise s.error("network_interface_whitelist", "IPv4 addresses separated by commas", address) from None
        return addresses

    # -- the lifecycle ---------------------------------------------------------------------------
    def on_configure(self) -> None:
        self._release()
        rdk = _import_rdk()
        try:
            robot = rdk.Robot(self.serial_number, self.whitelist, False)
        except ValueError as exc:
            raise HardwareError(f"flexiv: the RDK rejects serial number {self.serial_number!r}: {exc}") from None
        except RuntimeError as exc:
            raise LinkLost(f"flexiv: cannot connect to {self.serial_number}: {exc}. Check that the robot is on and "
                           "reachable from this PC (network_interface_whitelist), that its RDK server is activated "
                           f"in Flexiv Elements, and that flexivrdk {getattr(rdk, '__version__', '?')} matches the "
                           "robot's software version") from None
        info = robot.info()
        model = str(info.model_name)
        if info.DoF != ARM_DOF or not model.replace(" ", "").startswith("Rizon4"):
            raise HardwareError(f"flexiv: {self.serial_number} is a {model} with {info.DoF} joints; robot "
                                f"{self.robot.name} expects a Rizon 4 with {ARM_DOF} joints and no external axes")
        self._rdk, self._robot = rdk, robot
        self._facts = {"serial_number": str(info.serial_num), "model": model,
                       "software_version": str(info.software_ver),
                       "rdk_version": str(getattr(rdk, "__version__", "unknown"))}
        self._last_stamp = tuple(robot.states().timestamp)
        self._silence.reset(time.monotonic())
        if self.gripper_name:
            self._enable_gripper(rdk, robot)
        self._sent_at, self._sent_opening, self._sent_force = -math.inf, math.nan, math.nan
        self._resume_after_reset = self._lost = False
        self._last_error = ""
        self.state = Lifecycle.INACTIVE

    def _enable_gripper(self, rdk, robot) -> None:
        gripper = rdk.Gripper(robot)
        try:
            gripper.Enable(self.gripper_name)
        except ValueError as exc:
            raise HardwareError(f"flexiv: no gripper {self.gripper_name!r} on {self.serial_number} ({exc}); set "
                                "flexiv.gripper_name to the device name configured in Flexiv Elements, or '' "
                                "for none") from None
        except RuntimeError as exc:
            raise HardwareError(f"flexiv: cannot enable gripper {self.gripper_name!r}: {exc}") from None
        params, spec = gripper.params(), self.robot.grippers[0]
        self._gripper_speed = float(np.clip(spec.max_speed, params.min_vel, params.max_vel))
        self._gripper_force_range = (float(params.min_force), float(params.max_force))
        self._gripper_force = float(np.clip(spec.max_force, *self._gripper_force_range))
        low, high = spec.opening_range
        self._gripper_range = (max(low, params.min_width), min(high, params.max_width))
        self._gripper = gripper
        self._gripper_worker = LatestWorker("flexiv-gripper", self._move_gripper)
        self._facts["gripper"] = self.gripper_name

    def _move_gripper(self, command: tuple[float, float]) -> None:
        width, force = command
        self._gripper.Move(width, self._gripper_speed, force)

    def on_activate(self) -> None:
        robot = self._session()
        if robot.fault():
            raise HardwareError(f"flexiv: {self.serial_number} is in fault; clear it with ~/reset before enabling")
        if not robot.estop_released():
            raise HardwareError(f"flexiv: the E-stop of {self.serial_number} is pressed; release it before enabling")
        try:
            robot.Enable()
            deadline = time.monotonic() + self.operational_timeout_s
            while not robot.operational():
                if time.monotonic() > deadline:
                    status = robot.operational_status().name
                    raise HardwareError(f"flexiv: {self.serial_number} is not operational after "
                                        f"{self.operational_timeout_s:g} s: {status}: "
                                        f"{_NOT_OPERATIONAL_HINTS.get(status, 'see Flexiv Elements')}")
                time.sleep(0.01)
            robot.SwitchMode(self._rdk.Mode.NRT_JOINT_POSITION)
        except RuntimeError as exc:
            raise self._request_failed("enabling joint position streaming", exc) from None
        self._sent_at = -math.inf
        self.state = Lifecycle.ACTIVE

    def on_deactivate(self) -> None:
        if self.state is not Lifecycle.ACTIVE:
            return
        robot = self._session()
        try:
            robot.Stop()  # stops, then holds in IDLE mode
        except RuntimeError as exc:
            raise self._request_failed("stopping", exc) from None
        self.state = Lifecycle.INACTIVE

    def on_cleanup(self) -> None:
        if self.state is Lifecycle.ACTIVE and self._link_alive():
            try:
                self._robot.Stop()
            except RuntimeError:
                pass  # going away regardless; the robot stops on its own when commands stop
        self._release()
        self.state = Lifecycle.FINALIZED

    def _release(self) -> None:
        if self._gripper_worker is not None:
            self._gripper_worker.close()
        self._gripper_worker = self._gripper = self._robot = None  # the RDK closes its session on release

    def reset(self) -> None:
        """Clear a recoverable fault (Robot.ClearFault); if the arm was streaming when it struck,
        enable streaming again. Nothing moves: the driver streams the way home itself."""
        robot = self._session()
        resume = self._resume_after_reset or self.state is Lifecycle.ACTIVE
        try:
            if robot.fault() and not robot.ClearFault():
                raise HardwareError(f"flexiv: the fault of {self.serial_number} did not clear (a critical fault "
                                    "may need a power cycle)")
        except RuntimeError as exc:
            raise self._request_failed("clearing the fault", exc) from None
        self._resume_after_reset, self._last_error = False, ""
        self.state = Lifecycle.INACTIVE
        if resume:
            self.on_activate()

    # -- the control cycle -------------------------------------------------------------------------
    def read(self) -> JointSample:
        robot = self._session()
        states = robot.states()
        now = self.now
        self._check_link(robot, tuple(states.timestamp), now)
        self._check_fault(robot)
        position = np.asarray(states.q, float)
        velocity = np.asarray(states.dq, float)
        effort = np.asarray(states.tau, float)
        if self._gripper is not None:
            grip = self._gripper.states()
            fingers = len(self.robot.gripper_joint_names)
            position = np.concatenate([position, np.full(fingers, grip.width / fingers)])
            velocity = np.concatenate([velocity, np.full(fingers, np.nan)])
            effort = np.concatenate([effort, np.full(fingers, grip.force)])  # each finger pushes with the grip force
        else:
            missing = np.full(len(self.robot.gripper_joint_names), np.nan)
            position, velocity, effort = (np.concatenate([v, missing]) for v in (position, velocity, effort))
        return JointSample(now, self._names, position, velocity, effort)

    def write(self, command: JointCommand, gripper_openings: np.ndarray,
              gripper_forces: np.ndarray | None = None) -> None:
        robot = self._session()
        now = self.now
        self._check_link(robot, tuple(robot.states().timestamp), now)
        self._check_fault(robot)
        if self.state is not Lifecycle.ACTIVE:
            return  # not streaming (inactive, or in fault until ~/reset): the robot holds
        if now - self._sent_at >= 1.0 / self.command_rate_hz - 1e-6:
            # Zero target velocity: should commands stop, the robot comes to rest on the last target.
            try:
                robot.SendJointPosition([float(p) for p in command.position], [0.0] * ARM_DOF,
                                        self._max_vel, self._max_acc)
            except ValueError as exc:
                raise HardwareError(f"flexiv: SendJointPosition refused the setpoint: {exc}") from None
            except RuntimeError as exc:
                if not self._link_alive():
                    self._lost, self.state = True, Lifecycle.ERROR
                    raise LinkLost(f"flexiv: link to {self.serial_number} lost while streaming: {exc}") from None
                # The robot stopped taking setpoints (it faulted, or left the mode): hold until ~/reset.
                self._last_error = f"SendJointPosition: {exc}"
                self._resume_after_reset, self.state = True, Lifecycle.ERROR
                return
            self._sent_at = now
        if self._gripper_worker is not None and len(gripper_openings):
            error = self._gripper_worker.take_error()
            if error is not None:
                self._last_error = f"gripper {self.gripper_name}: {error}"
            opening = float(np.clip(gripper_openings[0], *self._gripper_range))
            # The gripper's own force range bounds a commanded force, as it bounds the default.
            force = float(np.clip(grip_force(gripper_forces, 0, self._gripper_force), *self._gripper_force_range))
            # Also true for the first (NaN); a new force alone moves again with it.
            if not abs(opening - self._sent_opening) <= GRIPPER_DEADBAND_M or force != self._sent_force:
                self._gripper_worker.submit((opening, force))
                self._sent_opening, self._sent_force = opening, force

    # -- link and faults ---------------------------------------------------------------------------
    def _session(self):
        if self._robot is None or self._lost:
            raise LinkLost(f"flexiv: not connected to {self.serial_number}; connect again (on_configure)")
        return self._robot

    def _check_link(self, robot, stamp: tuple, now: float) -> None:
        if stamp != self._last_stamp:
            self._last_stamp = stamp
            self._silence.heard(now)
        silent = self._silence.silence(now)
        if silent > self.link_timeout_s or not robot.connected():
            self._lost, self.state = True, Lifecycle.ERROR
            raise LinkLost(f"flexiv: {self.serial_number} stopped answering: no new state for "
                           f"{silent * 1000:.0f} ms (link timeout {self.link_timeout_s * 1000:.0f} ms), "
                           f"connected() is {robot.connected()}")

    def _link_alive(self) -> bool:
        return self._robot is not None and not self._lost and self._robot.connected()

    def _check_fault(self, robot) -> None:
        if robot.fault() and self.state is not Lifecycle.ERROR:
            self._resume_after_reset = self.state is Lifecycle.ACTIVE
            self.state = Lifecycle.ERROR

    def _fault_text(self, robot) -> str:
        events = robot.event_log()
        last = f", last event: {events[-1].description}" if events else ""
        return f"{robot.operational_status().name}{last}"

    def _request_failed(self, doing: str, exc: Exception) -> HardwareError:
        if not self._link_alive():
            self._lost, self.state = True, Lifecycle.ERROR
            return LinkLost(f"flexiv: link to {self.serial_number} lost while {doing}: {exc}")
        return HardwareError(f"flexiv: {doing} failed: {exc}")

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts.update(self._facts)
        facts.update(serial_number=self.serial_number, command_rate_hz=self.command_rate_hz,
                     mode="NRT_JOINT_POSITION" if self.state is Lifecycle.ACTIVE else "idle")
        robot = self._robot
        if robot is not None and self._link_alive():
            facts.update(robot_mode=robot.mode().name, operational_status=robot.operational_status().name,
                         fault=robot.fault(), estop_released=robot.estop_released())
            if robot.fault():
                facts["fault_detail"] = self._fault_text(robot)
        if self._gripper_worker is not None:
            facts["gripper_moves"] = self._gripper_worker.calls
            facts["gripper_force_n"] = self._sent_force
        if self._last_error:
            facts["last_error"] = self._last_error
        return facts


def _import_rdk():
    try:
        import flexivrdk
    except ImportError as exc:
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise HardwareError(
            f"backend flexiv needs {RDK_PACKAGE} {RDK_VERSION} (Flexiv RDK's Python API), which does not import "
            f"here ({exc}). Its wheels on PyPI are built for CPython {', '.join(RDK_PYTHONS)} only, none for "
            f"3.11 or 3.13, and this is Python {here}: run the driver under Python 3.10, 3.12 or 3.14 and "
            f"install it with `pip install .[drivers]` (or `pip install {RDK_PACKAGE}=={RDK_VERSION}`)") from None
    return flexivrdk
