"""UFACTORY xArm 7 through the official `xarm-python-sdk` (XArmAPI), in joint servo mode.

Control: mode 1 (servo-j), one `set_servo_angle_j` (radians) per control cycle. The controller
interpolates between the streamed targets itself, so the host needs no real-time kernel; the
driver's rate (the robot's 250 Hz) sits in the 100-250 Hz band servo-j is meant for. Each
servo-j call waits for the controller's reply, so a sender thread makes it: `write()` hands
over the newest setpoints and returns at once.

Feedback: the controller's real-time report (port 30003, 100 Hz) carries joint positions and
torques, but not velocities, error codes or the gripper. The SDK's report thread hands every
report to `_on_report`, which stamps it on arrival (host monotonic clock) and estimates
velocities from the positions of the last five reports (a 40 ms span, so that arrival jitter
of a few milliseconds does not show as speed); `read()` only returns the newest report, so it
never blocks. The link is lost when no report came for `link_timeout_s` (five report periods
at the default) or a servo-j call has waited SERVO_REPLY_PATIENCE times that for its reply.

A second worker thread runs the other blocking calls: xArm Gripper moves and polls over the
tool RS-485 bus (on the SDK's second command socket, port 503, when the controller offers it,
so they never hold the servo stream's socket) and polls of the controller's error and warning
codes.

Lifecycle on the controller: on_configure() clears a pending error or warning, enables the motors
and leaves the arm holding in position mode (mode 0, state 0); on_activate() switches to servo
mode; on_deactivate() back to position mode, where the arm holds. on_cleanup() while the arm is
still moving (a joint faster than 0.01 rad/s between the last two reports; the report's state
field is no guide, streaming keeps it at "moving") calls the SDK's emergency_stop(): the
controller stops the arm and keeps the motors enabled. Otherwise on_cleanup() leaves the arm in
position mode. A lost link is recovered by on_configure(), which opens a fresh XArmAPI: reusing the
old one races with its report thread, which disconnects it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import ipaddress
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, NoReturn

import numpy as np

from r2s2r.config import ConfigError, Section
from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware._link import SilenceClock
from r2s2r.hardware._worker import LatestWorker
from r2s2r.hardware.base import Hardware, HardwareError, Lifecycle, LinkLost
from r2s2r.robots import RobotSpec

SDK_PACKAGE = "xarm-python-sdk"
SDK_JOINTS = tuple(f"joint{i}" for i in range(1, 8))  # the SDK's joint order, J1..J7
GRIPPER_OPEN_PULSES = 850  # xArm Gripper: 0 pulses closed .. 850 pulses fully open (85 mm)
SETUP_TIMEOUT_S = 2.0  # the SDK's own reply timeout, for set-up calls
MODE_SWITCH_TIMEOUT_S = 1.0  # how long the report stream may take to show a new mode
STILL_SPEED = 0.01  # rad/s: every joint slower than this between two reports is standing still
VELOCITY_REPORTS = 5  # velocities: position change across this many reports

# xArm controller modes and states (the SDK's report fields).
MODE_POSITION, MODE_SERVO = 0, 1
STATE_NAMES = {0: "ready", 1: "moving", 2: "sleeping", 3: "paused", 4: "stopped", 5: "stopped (e-stop)"}
STATES_READY = (1, 2)

# SDK return codes (xarm.x3.code.APIState) that mean the controller is not answering.
CODE_NOT_CONNECTED, CODE_TIMEOUT, CODE_SEND_FAILED = -1, 3, 8
LINK_CODES = (CODE_NOT_CONNECTED, CODE_TIMEOUT, CODE_SEND_FAILED)
CODE_HAS_ERROR, CODE_NOT_READY, CODE_OUT_OF_RANGE = 1, 9, -8


# Multiples of link_timeout_s a servo-j reply may take (see _check_servo_stream).
SERVO_REPLY_PATIENCE = 4.0


@dataclass(frozen=True)
class XArmSettings:
    """The `xarm:` settings (config/robots/xarm7.yaml, driver parameters `xarm.<key>`)."""

    ip: str
    link_timeout_s: float = 0.05
    connect_timeout_s: float = 5.0
    gripper: bool = True
    gripper_speed: int = 5000
    status_poll_hz: float = 10.0

    @classmethod
    def parse(cls, settings: Mapping[str, Any]) -> "XArmSettings":
        """Validate; a bad value raises HardwareError naming `xarm.<key>` and what was expected."""
        try:
            section = Section(dict(settings), "driver parameters", "xarm")
            section.reject_unknown(cls.__dataclass_fields__)
            ip = section.raw("ip", "")
            try:
                ipaddress.IPv4Address(ip if isinstance(ip, str) else "")
            except ValueError:
                # The SDK takes anything that is not a dotted IPv4 address for a serial port.
                raise section.error("ip", "the controller's IPv4 address, as printed on the control box "
                                    "(e.g. 192.168.1.185)", ip) from None
            speed = section.integer("gripper_speed", cls.gripper_speed, minimum=1000)
            if speed > 5000:
                raise section.error("gripper_speed", "an integer from 1000 to 5000 (r/min)", speed)
            return cls(
                ip=ip,
                # At least two report periods (100 Hz), at most what the driver's 100 ms budget allows.
                link_timeout_s=section.number("link_timeout_s", cls.link_timeout_s, minimum=0.02, maximum=0.1),
                connect_timeout_s=section.number("connect_timeout_s", cls.connect_timeout_s, minimum=0.5),
                gripper=section.boolean("gripper", cls.gripper),
                gripper_speed=speed,
                status_poll_hz=section.number("status_poll_hz", cls.status_poll_hz, minimum=1.0, maximum=50.0),
            )
        except ConfigError as error:
            raise HardwareError(str(error)) from None


@dataclass(frozen=True)
class _Report:
    """One real-time report as it arrived; arrays in the SDK's joint order."""

    stamp: float
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    state: int
    mode: int


class _ServoRefused(Exception):
    """A servo-j call failed; `link` tells a silent controller from a refusing one."""

    def __init__(self, reason: str, link: bool):
        super().__init__(reason)
        self.link = link


def _import_sdk():
    try:
        from xarm.wrapper import XArmAPI
    except ImportError as exc:
        raise HardwareError(f"backend xarm needs the UFACTORY SDK, which is not installed ({exc}): "
                            f"pip install {SDK_PACKAGE}, or the project's drivers extra: "
                            "pip install .[drivers]") from exc
    return XArmAPI


def _controller_error(code: int) -> str:
    from xarm.core.config.x_code import ControllerError
    info = ControllerError(code)
    text = f"controller error C{code} ({info.title['en']})"
    return f"{text}: {info.description['en']}" if info.description["en"] else text


def _state_name(state: int) -> str:
    return f"{state} ({STATE_NAMES.get(state, 'unknown')})"


class XArmHardware(Hardware):
    backend = "xarm"

    def __init__(self, robot: RobotSpec, settings: Mapping[str, Any] | None = None):
        super().__init__(robot, settings)
        self.config = XArmSettings.parse(self.settings)
        self.link_timeout_s = self.config.link_timeout_s
        self.servo_reply_timeout_s = SERVO_REPLY_PATIENCE * self.link_timeout_s
        if sorted(robot.joint_names) != sorted(SDK_JOINTS) or len(robot.grippers) > 1:
            raise HardwareError(f"backend xarm drives an xArm 7 (joints {', '.join(SDK_JOINTS)}, at most one "
                                f"xArm Gripper); robot {robot.name} has joints {', '.join(robot.joint_names)} "
                                f"and {len(robot.grippers)} grippers")
        # robot joint i is SDK joint _sdk_index[i]
        self._sdk_index = np.array([SDK_JOINTS.index(name) for name in robot.joint_names])
        self._gripper = robot.grippers[0] if robot.grippers else None
        self._use_gripper = self.config.gripper and self._gripper is not None
        self._api = None
        self._handshake: _Handshake | None = None
        self._report: _Report | None = None
        self._recent: collections.deque = collections.deque(maxlen=VELOCITY_REPORTS)  # (stamp, position)
        self._first_report = threading.Event()
        self._silence = SilenceClock(self.link_timeout_s, 0.0)  # since the last report
        self._servo: LatestWorker | None = None  # sends servo-j
        self._servo_wait: SilenceClock | None = None  # since the servo-j call in flight was made
        self._status: LatestWorker | None = None  # gripper commands, gripper and error-code polls
        self._link_lost = ""  # why, once the link is gone: read/write keep failing until on_configure()
        self._fault = ""  # a controller fault that reset() may clear
        self._wants_servo = False  # on_activate() asked for servo mode; reset() restores it
        self._gripper_sent: int | None = None
        self._gripper_pulses = math.nan
        self._gripper_fault = ""
        self._gripper_port = ""
        self._codes = (0, 0)  # controller error and warning codes, as last polled
        self._identity: dict[str, Any] = {}

    # -- the lifecycle ---------------------------------------------------------------------------
    def on_configure(self) -> None:
        xarm_api = _import_sdk()
        self._close_link()
        self.state = Lifecycle.UNCONFIGURED
        self._link_lost = self._fault = self._gripper_fault = ""
        api = self._open(xarm_api)
        try:
            self._configure(api)
        except BaseException:
            self._close_link()
            raise
        self.state = Lifecycle.INACTIVE

    def on_activate(self) -> None:
        if self.state is Lifecycle.ACTIVE:
            return
        self._check_usable("on_activate()")
        with self._patient(self._api):
            self._enter_mode(MODE_SERVO)
        self._wants_servo = True
        self.state = Lifecycle.ACTIVE

    def on_deactivate(self) -> None:
        if self.state is not Lifecycle.ACTIVE:
            return
        self._check_usable("on_deactivate()")
        with self._patient(self._api):
            self._enter_mode(MODE_POSITION)
        self._wants_servo = False
        self.state = Lifecycle.INACTIVE

    def on_cleanup(self) -> None:
        api = self._api
        if (api is not None and self.state is Lifecycle.ACTIVE and not self._link_lost
                and self._report_age() <= self.link_timeout_s):
            # Replies get only the streaming timeout here: a controller that has gone quiet
            # must not hold up a disconnect.
            self._servo.flush(self.link_timeout_s)
            if self._standing_still():
                api.set_mode(MODE_POSITION)
                api.set_state(0)
            else:
                api.emergency_stop()  # the stream ends here: stop the arm rather than let it coast
        self._close_link()
        if self._handshake is not None:
            self._handshake.abandon()
            self._handshake = None
        self._wants_servo = False
        self.state = Lifecycle.FINALIZED

    def reset(self) -> None:
        """Clear recoverable faults: controller error and warning, disabled motors, the gripper's
        error; then return to the mode the arm was in (servo mode if it was active). Nothing moves:
        the driver streams the way home itself."""
        self._check_link("reset()")
        api = self._api
        with self._patient(api):
            code, (error, warning) = api.get_err_warn_code()
            self._check(code, "get_err_warn_code")
            if not (error or warning or self._fault or self._gripper_fault):
                return
            self._clear_faults(api, error, warning)
            if self._use_gripper:
                self._start_gripper(api)
            self._fault = self._gripper_fault = ""
            self._enter_mode(MODE_SERVO if self._wants_servo else MODE_POSITION)
        self.state = Lifecycle.ACTIVE if self._wants_servo else Lifecycle.INACTIVE

    # -- the control cycle -------------------------------------------------------------------------
    def read(self) -> JointSample:
        report = self._check_link("read()")
        arm = (report.position[self._sdk_index], report.velocity[self._sdk_index], report.effort[self._sdk_index])
        if self._gripper is None:
            return JointSample(report.stamp, self.robot.joint_names, *arm)
        fingers = len(self._gripper.joints)
        finger = np.full(fingers, self._pulses_to_opening(self._gripper_pulses) / fingers)
        unknown = np.full(fingers, math.nan)  # the gripper reports no speed or force
        return JointSample(report.stamp, self.robot.joint_names + self._gripper.joints,
                           np.concatenate([arm[0], finger]), np.concatenate([arm[1], unknown]),
                           np.concatenate([arm[2], unknown]))

    def write(self, command: JointCommand, gripper_openings: np.ndarray,
              gripper_forces: np.ndarray | None = None) -> None:
        """`gripper_forces` cannot be followed: the xArm Gripper takes a position and a speed only."""
        self._check_link("write()")
        self._check_servo_stream()
        if self._fault:
            raise HardwareError(f"xarm: {self._fault}; reset() clears it")
        if self.state is not Lifecycle.ACTIVE:
            raise HardwareError(f"xarm: write() while {self.state.value}; activate it first (on_activate)")
        if command.names != self.robot.joint_names:
            raise HardwareError(f"xarm: setpoints for {', '.join(command.names)}; expected "
                                f"{', '.join(self.robot.joint_names)}")
        target = np.empty(len(SDK_JOINTS))
        target[self._sdk_index] = command.position
        self._servo.submit(target.tolist())
        if self._use_gripper and len(gripper_openings):
            pulses = self._opening_to_pulses(float(gripper_openings[0]))
            if pulses != self._gripper_sent:  # the RS-485 bus is slow: send changes only
                self._status.submit(pulses)
                self._gripper_sent = pulses
        error = self._status.take_error()  # an exception the SDK raised on the worker thread
        if error is not None:
            self._gripper_fault = f"{type(error).__name__}: {error}"

    def describe(self) -> dict[str, Any]:
        facts = {**super().describe(), "ip": self.config.ip, **self._identity,
                 "control": "servo-j (mode 1) streaming, radians", "link_timeout_s": self.link_timeout_s}
        report = self._report
        if report is not None:
            facts.update(arm_state=_state_name(report.state), arm_mode=report.mode,
                         report_age_ms=round(1000.0 * self._report_age(), 1))
        error, warning = self._codes
        facts.update(error_code=error, warn_code=warning)
        if error and self._api is not None:
            facts["error"] = _controller_error(error)
        if self._link_lost:
            facts["link_lost"] = self._link_lost
        if self._fault:
            facts["fault"] = self._fault
        servo = self._servo
        if servo is not None:
            facts["servo_j_sent"] = servo.calls
        if self._use_gripper:
            facts.update(gripper_opening_m=round(self._pulses_to_opening(self._gripper_pulses), 5),
                         gripper_port=self._gripper_port, gripper_fault=self._gripper_fault,
                         gripper_force="its own (the xArm Gripper has no force setting: max_effort is not applied)")
        else:
            facts["gripper"] = "not used (xarm.gripper: false)" if self._gripper else "none"
        return facts

    # -- connecting ------------------------------------------------------------------------------
    def _open(self, xarm_api):
        """XArmAPI(ip) under a deadline: a controller that accepts TCP but never answers would
        keep the SDK's handshake retrying for minutes. A handshake that outlives its deadline is
        not started again: the next on_configure() waits for the same one."""
        ip, deadline = self.config.ip, self.config.connect_timeout_s
        if self._handshake is None:
            # report_type 'real': the 100 Hz joint stream; forbid_uds: never a local socket file.
            self._handshake = _Handshake(ip, lambda: xarm_api(ip, is_radian=True, forbid_uds=True,
                                                              report_type="real"))
        if not self._handshake.done.wait(deadline):
            raise LinkLost(f"xarm: the controller at {ip} accepted the connection but did not finish the "
                           f"SDK handshake within {deadline:g} s (xarm.connect_timeout_s)")
        handshake, self._handshake = self._handshake, None
        if handshake.api is None:
            raise LinkLost(f"xarm: cannot connect to the controller at {ip} (ports 502, 30003): "
                           f"{handshake.error}; is it powered on and this host on its network?")
        self._api = handshake.api
        return self._api

    def _configure(self, api) -> None:
        ip = self.config.ip
        if api.axis != len(SDK_JOINTS):
            raise HardwareError(f"xarm: the controller at {ip} drives a {api.axis}-axis arm; robot "
                                f"{self.robot.name} is an xArm 7")
        self._report, self._first_report = None, threading.Event()
        self._recent.clear()
        self._silence.reset(time.monotonic())
        api.register_report_location_callback(functools.partial(self._on_report, api),
                                              report_cartesian=False, report_joints=True)
        with self._patient(api):
            code, (error, warning) = api.get_err_warn_code()
            self._check(code, "get_err_warn_code")
            self._clear_faults(api, error, warning)
            api.get_robot_sn()
            self._identity = {"firmware": ".".join(map(str, api.version_number)), "robot_sn": api.sn,
                              "control_box_sn": api.control_box_sn, "error_at_connect": error,
                              "warn_at_connect": warning}
            self._check(api.set_mode(MODE_POSITION), "set_mode(0)")
            self._check(api.set_state(0), "set_state(0)")
            if not self._first_report.wait(MODE_SWITCH_TIMEOUT_S):
                raise LinkLost(f"xarm: the controller at {ip} answers commands but sends no real-time "
                               f"report (port 30003) within {MODE_SWITCH_TIMEOUT_S:g} s")
            self._gripper_sent, self._gripper_pulses = None, math.nan
            if self._use_gripper:
                self._start_gripper(api)
        self._servo_wait = None
        self._servo = LatestWorker(f"xarm-servo-{ip}", functools.partial(self._send_servo, api))
        self._status = LatestWorker(f"xarm-status-{ip}", functools.partial(self._send_gripper, api),
                                    functools.partial(self._poll_status, api),
                                    idle_period_s=1.0 / self.config.status_poll_hz)

    def _clear_faults(self, api, error: int, warning: int) -> None:
        """clean_error / clean_warn / motion_enable, the SDK's start-up sequence."""
        if error:
            self._check(api.clean_error(), "clean_error")
        if warning:
            self._check(api.clean_warn(), "clean_warn")
        self._check(api.motion_enable(True), "motion_enable")
        code, (error, warning) = api.get_err_warn_code()
        self._check(code, "get_err_warn_code")
        self._codes = (error, warning)
        if error:
            raise HardwareError(f"xarm: {_controller_error(error)} (still there after clean_error)")

    def _start_gripper(self, api) -> None:
        """Enable the xArm Gripper in position mode and read where it is (blocking; set-up only)."""
        # The gripper's RS-485 traffic goes to the second command socket when there is one.
        use_503 = api.set_rs485_use_503_port(True) == 0
        self._gripper_port = "503 (own socket)" if use_503 else "502 (shared with the servo stream)"
        speed = self.config.gripper_speed
        steps = {"set_gripper_enable(True)": lambda: api.set_gripper_enable(True),
                 "set_gripper_mode(0)": lambda: api.set_gripper_mode(0),  # position mode
                 f"set_gripper_speed({speed})": lambda: api.set_gripper_speed(speed)}
        for what, call in steps.items():
            code = call()
            if code != 0:
                error = api.get_err_warn_code()[1][0]
                raise HardwareError(f"xarm: the xArm Gripper does not answer ({what} returned SDK code {code}; "
                                    f"{_controller_error(error) if error else 'no controller error'}); check "
                                    "its cable, or set xarm.gripper: false for an arm without one")
        code, pulses = self._gripper_position(api)
        if pulses is None:
            raise HardwareError(f"xarm: cannot read the xArm Gripper's position (SDK code {code})")
        self._gripper_pulses = pulses

    @staticmethod
    def _gripper_position(api) -> tuple[int, float | None]:
        result = api.get_gripper_position()
        # A gripper in fault makes the SDK return the bare code instead of (code, position).
        code, pulses = result if isinstance(result, tuple) else (result, None)
        return code, (float(pulses) if code == 0 and pulses is not None else None)

    # -- worker-thread calls (blocking SDK calls) ------------------------------------------------
    def _send_servo(self, api, target: list[float]) -> None:
        self._servo_wait = SilenceClock(self.servo_reply_timeout_s, time.monotonic())
        try:
            code = api.set_servo_angle_j(target)
        finally:
            self._servo_wait = None
        if code in LINK_CODES:
            raise _ServoRefused(f"set_servo_angle_j: no answer from {self.config.ip} within "
                                f"{1000 * self.servo_reply_timeout_s:.0f} ms (SDK code {code})",
                                link=True)
        if code == CODE_HAS_ERROR:
            _, (error, warning) = api.get_err_warn_code()
            self._codes = (error, warning)
            raise _ServoRefused(_controller_error(error), link=False)
        if code == CODE_NOT_READY:
            raise _ServoRefused(f"the arm stopped accepting motion (state {_state_name(self._report.state)}): "
                                "an emergency stop, a protective stop or another client", link=False)
        if code == CODE_OUT_OF_RANGE:
            raise _ServoRefused("a setpoint outside the SDK's joint range", link=False)
        if code != 0:
            raise _ServoRefused(f"set_servo_angle_j returned SDK code {code}", link=False)

    # A gripper failure is kept for describe() and reset(); the arm streams on.
    def _send_gripper(self, api, pulses: int) -> None:
        code = api.set_gripper_position(pulses, wait=False, wait_motion=False)
        if code != 0:
            self._gripper_fault = f"set_gripper_position({pulses}) returned SDK code {code}"

    def _poll_status(self, api) -> None:
        if not api.connected:
            return
        code, codes = api.get_err_warn_code()
        if code == 0:
            self._codes = (codes[0], codes[1])
        if self._use_gripper:
            code, pulses = self._gripper_position(api)
            if pulses is None:
                self._gripper_fault = f"get_gripper_position() returned SDK code {code}"
            else:
                self._gripper_pulses = pulses

    # -- the report stream (SDK report thread) --------------------------------------------------
    def _on_report(self, api, data: dict) -> None:
        if api is not self._api:
            return  # a late report of an instance already replaced
        now = time.monotonic()
        position = np.asarray(data["joints"][:len(SDK_JOINTS)], float)
        self._recent.append((now, position))
        then, earlier = self._recent[0]
        if now > then:
            velocity = (position - earlier) / (now - then)
        else:
            velocity = np.full(len(SDK_JOINTS), math.nan)
        effort = np.asarray(api.joints_torque[:len(SDK_JOINTS)], float)
        self._report = _Report(now, position, velocity, effort, int(api.state), int(api.mode))
        self._silence.heard(now)
        self._first_report.set()

    def _standing_still(self) -> bool:
        """No joint moved faster than STILL_SPEED between the last two reports."""
        recent = list(self._recent)
        if len(recent) < 2:
            return False
        (before, q_before), (now, q_now) = recent[-2:]
        return bool(np.all(np.abs(q_now - q_before) <= STILL_SPEED * (now - before)))

    def _report_age(self) -> float:
        report = self._report
        return math.inf if report is None else time.monotonic() - report.stamp

    # -- checks ------------------------------------------------------------------------------------
    def _check_usable(self, what: str) -> None:
        self._check_link(what)
        if self._fault:
            raise HardwareError(f"xarm: {what}: {self._fault}; reset() clears it")

    def _check_link(self, what: str) -> _Report:
        if self._api is None:
            raise HardwareError(f"xarm: {what} needs a connection; connect first (on_configure)")
        if self._link_lost:
            raise LinkLost(f"xarm: {self._link_lost}; connect again (on_configure)")
        if not self._api.connected:
            self._lose_link(f"the controller at {self.config.ip} closed the connection")
        # A stall of this host's own (the caller not looking for a while) does not count as silence.
        silent = self._silence.silence(time.monotonic())
        if silent > self.link_timeout_s:
            self._lose_link(f"no report from the controller at {self.config.ip} for {1000 * silent:.0f} ms "
                            f"(xarm.link_timeout_s {1000 * self.link_timeout_s:.0f} ms)")
        return self._report

    def _check_servo_stream(self) -> None:
        """What the sender thread found: no reply in time is a lost link, a refusal a fault.

        A dead controller is caught within link_timeout_s by its silent report stream; a reply
        merely delayed (a busy host, the SDK's shared command lock) gets SERVO_REPLY_PATIENCE
        times that before it, too, counts as a lost link."""
        wait = self._servo_wait  # a stall of this host's own grants the reply a fresh patience, as for reports
        waited = wait.silence(time.monotonic()) if wait is not None else 0.0
        if waited > self.servo_reply_timeout_s:
            self._lose_link(f"set_servo_angle_j unanswered by {self.config.ip} for {1000 * waited:.0f} ms")
        failure = self._servo.take_error()
        if failure is None:
            return
        if isinstance(failure, _ServoRefused) and failure.link:
            self._lose_link(str(failure))
        self._fault = str(failure) if isinstance(failure, _ServoRefused) else f"{type(failure).__name__}: {failure}"
        self.state = Lifecycle.ERROR
        raise HardwareError(f"xarm: {self._fault}; reset() clears recoverable faults")

    def _lose_link(self, reason: str) -> NoReturn:
        self._link_lost = reason
        self.state = Lifecycle.ERROR
        raise LinkLost(f"xarm: {reason}")

    def _check(self, code: int, what: str) -> None:
        """Turn an SDK return code from a set-up call into LinkLost or HardwareError."""
        if code == 0:
            return
        if code in LINK_CODES:
            self._lose_link(f"{what}: the controller at {self.config.ip} did not answer (SDK code {code})")
        raise HardwareError(f"xarm: {what} failed with SDK code {code}")

    def _enter_mode(self, mode: int) -> None:
        if self._servo is not None:
            self._servo.flush(self.link_timeout_s)  # no servo-j may land after the switch
        api = self._api
        self._check(api.set_mode(mode), f"set_mode({mode})")
        self._check(api.set_state(0), "set_state(0)")
        # The switch is done when the report stream shows it.
        deadline = time.monotonic() + MODE_SWITCH_TIMEOUT_S
        report = self._check_link(f"set_mode({mode})")
        while not (report.mode == mode and report.state in STATES_READY):
            if time.monotonic() > deadline:
                raise HardwareError(f"xarm: the arm did not become ready in mode {mode} within "
                                    f"{MODE_SWITCH_TIMEOUT_S:g} s (mode {report.mode}, state "
                                    f"{_state_name(report.state)}); check the emergency stop and the "
                                    "controller's error code")
            time.sleep(0.01)
            report = self._check_link(f"set_mode({mode})")

    @contextlib.contextmanager
    def _patient(self, api):
        """Set-up calls get the SDK's usual 2 s to answer; streaming calls SERVO_REPLY_PATIENCE
        link timeouts (they wait on the sender thread, never in the control loop; the report
        stream's silence is what catches a dead controller within link_timeout_s)."""
        api.set_timeout(SETUP_TIMEOUT_S)
        try:
            yield
        finally:
            api.set_timeout(self.servo_reply_timeout_s)

    # -- gripper units -----------------------------------------------------------------------------
    def _opening_to_pulses(self, opening: float) -> int:
        lo, hi = self._gripper.opening_range
        return int(round(np.clip((opening - lo) / (hi - lo), 0.0, 1.0) * GRIPPER_OPEN_PULSES))

    def _pulses_to_opening(self, pulses: float) -> float:
        lo, hi = self._gripper.opening_range
        return lo + (hi - lo) * float(np.clip(pulses / GRIPPER_OPEN_PULSES, 0.0, 1.0))

    def _close_link(self) -> None:
        workers, api = (self._servo, self._status), self._api
        self._servo = self._status = self._api = None
        for worker in workers:
            if worker is not None:
                worker.close(timeout_s=0.5)
        if api is not None:
            api.disconnect()


class _Handshake:
    """One XArmAPI construction (connect, version, serial numbers) on a thread of its own."""

    def __init__(self, ip: str, make_api):
        self.done = threading.Event()
        self.api = None
        self.error: Exception | None = None
        self._abandoned = False
        self._lock = threading.Lock()
        threading.Thread(target=self._run, args=(make_api,), name=f"xarm-connect-{ip}", daemon=True).start()

    def _run(self, make_api) -> None:
        try:
            api = make_api()
        except Exception as exc:  # the SDK raises bare Exceptions
            api, self.error = None, exc
        with self._lock:
            if self._abandoned and api is not None:
                api.disconnect()
            else:
                self.api = api
        self.done.set()

    def abandon(self) -> None:
        """Nobody will take the result: close it once it arrives."""
        with self._lock:
            self._abandoned = True
            if self.api is not None:
                self.api.disconnect()
                self.api = None
