"""Franka Research 3 and its Franka Hand through `pylibfranka`, Franka's own Python bindings of
libfranka, in real-time joint position control at the robot's 1 kHz. (libfranka 0.10 and later,
pylibfranka among them, serve the FR3 only; a Panda needs libfranka 0.9.)

Why two helper processes. Every pylibfranka call holds the GIL while it runs: `readOnce()`
waits up to one cycle for the robot's state packet, a lost link makes it wait out libfranka's
fixed 1 s UDP timeout, and a gripper `move()` blocks for the whole motion. A thread in the
driver would therefore stall the driver (and its ROS executor) with it, and could not notice a
lost link within `link_timeout_s`. So the arm and the Franka Hand each get a process of their
own:

- the arm process owns `pylibfranka.Robot`. Inactive, it reads the state with `read_once()`;
  active, it runs libfranka's active-control loop, `readOnce()` then `writeOnce(JointPositions)`,
  paced by the robot's own 1 kHz state packets. It may raise its scheduling priority to
  SCHED_FIFO (`realtime: enforce`), which the driver process need not have.
- the gripper process owns `pylibfranka.Gripper`, polls its width and runs `move()` / `grasp()`;
  only the newest opening command is carried out.

Driver and processes share a lock-protected mailbox (shared memory): the latest robot state
with the host's monotonic time it arrived, and a ring of the driver's setpoints. `read()` copies
the newest state and raises LinkLost when it is older than `link_timeout_s` (50 ms: fifty robot
cycles), so a lost link is reported long before libfranka's own 1 s timeout; `write()` appends
a setpoint. Neither ever waits on the robot.

From the driver's setpoints to the robot. The driver's control loop is a Python thread whose
cycles jitter by a millisecond and stall for a few when other threads hold the GIL, while the
robot wants one command every millisecond that obeys the FCI's necessary conditions on joint
position, velocity, acceleration and jerk (a violation is a reflex that stops the arm). Three
stages in the arm process turn one into the other:

1. `SetpointPlayer`, a jitter buffer: the driver's setpoints are played one per robot cycle,
   in order, one cycle behind the newest. When the driver misses a cycle, the setpoint is
   extrapolated at its last velocity for up to three cycles (the FCI treats lost packets the
   same way), after that the last setpoint is held. A backlog (the driver stalled, then caught
   up in a burst) is played out in order; it drains where the driver's setpoints repeat (the arm
   holds still, so nothing is lost), and only a backlog of more than 48 is skipped.
   One setpoint per cycle means the driver must run at the FCI's rate, control_rate_hz 1000
   (config/robots/franka_fr3.yaml): a slower loop's setpoints would be played too fast.
2. A first-order low-pass filter, libfranka's own form. The safety layer upstream limits
   velocity and acceleration but not jerk; this filter turns any stream with |acceleration| <= A
   into one with |jerk| <= 2 * gain * A / dt, so the cutoff is the highest that keeps that under
   the FCI jerk limit J: gain <= J * dt / (2 A), 53 Hz for the FR3 (A = 10 rad/s^2, J = 5000
   rad/s^3); the default is 50 Hz (3 ms of lag). libfranka's rate limiter and low-pass filter
   cannot simply be switched on: pylibfranka binds only the active-control API, where libfranka
   applies neither (they belong to its callback control loop).
3. `SetpointShaper`'s limiter, a backstop: per joint it bounds jerk, acceleration and velocity
   (including the FR3's position-based velocity limits near the joint limits) with libfranka's
   margins. For a stream that already obeys them it changes nothing; otherwise (a held
   setpoint, a skipped backlog, a start away from the measured position) it converges on the
   setpoint smoothly instead of jumping, and never past where the driver's setpoints would stop
   if the driver braked now: closing a gap left by a late driver never carries the arm beyond an
   estop's stopping point (by more than the extrapolation's carry). How often it acts is counted
   for diagnostics.

The Hand moves when the commanded opening changes by more than a millimetre while active:
opening with `move()`, closing with `grasp()`, which holds whatever is between the fingers at
the commanded force (a GripperCommand's max_effort) or else at `gripper_force`; a new force
alone grasps again. The opening the controller holds when the arm is activated moves nothing,
so connecting never moves the fingers.

Faults. A reflex (ControlException: collision, limit violation) ends the motion; read() then
raises FrankaReflex, a LinkLost, so the driver holds, reports and reconnects, and on_configure()
clears the reflex with `automatic_error_recovery()` when `recover_errors` is on. A network error
(NetworkException) or a silent robot is LinkLost. `reset()` clears a pending reflex; nothing is
ever teleported, the driver streams the way home itself.
"""

from __future__ import annotations

import fcntl
import ipaddress
import math
import mmap
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection
from typing import Any, Callable, Mapping

import numpy as np

from r2s2r.config import ConfigError, Section
from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware.base import Hardware, HardwareError, Lifecycle, LinkLost, grip_force
from r2s2r.robots import RobotSpec

SDK_PACKAGE = "pylibfranka"
DT = 1e-3  # the FCI's control period, seconds
LIMIT_EPS = 1e-3  # libfranka's margin below each FCI limit (kLimitEps)
LOST_PACKETS = 3  # libfranka's velocity margin assumes up to 3 lost packets (kTolNumberPacketsLost)
# The share of the FCI's acceleration the driver may plan with (FrankaHardware.command_limits); the
# rest is the shaper's, to close a gap (a skipped backlog, a held setpoint) while the driver's own
# setpoints brake at full rate, so closing it never overshoots them.
DRIVER_ACCELERATION_SHARE = 0.8
REACH_BRAKING_SHARE = 0.9  # SetpointShaper.step: how hard the command brakes to stay within reach
REACH_SLACK = 1e-5  # rad: how far past the reach the command may land
AT_REST_CLOSING_SHARE = 0.5  # of the FCI's acceleration: closing a gap to a driver at rest
PLAYOUT_DEPTH = 1  # setpoints buffered before playing (absorbs a cycle of driver jitter)
EXTRAPOLATED_CYCLES = 3  # driver silent this long: extrapolate, after that hold the last setpoint
# More unplayed setpoints than this (the player 48 ms behind the driver): skip to the newest. Below
# it a backlog is played out, never skipped while moving: a skip is a jump the shaper must absorb,
# and the FCI's commands then trail the driver's and run on after they stop.
MAX_BACKLOG = 48
RING = 64  # setpoints kept in the mailbox (more than MAX_BACKLOG)
STOP_TIMEOUT_S = 2.0  # deactivating: how long the arm may take to come to rest before finishing
REQUEST_TIMEOUT_S = 5.0  # activate, deactivate, error recovery
GRIPPER_TOLERANCE = 1e-3  # m: an opening command this close to the last one is not resent
GRIPPER_POLL_S = 0.02  # the Hand's width is read at 50 Hz between moves
GRASP_EPSILON_INNER = 0.005  # m: libfranka's default tolerance below the commanded width
GRASP_EPSILON_OUTER = 0.1  # m: any object wider than the command counts as grasped (the Hand opens 0.08)


@dataclass(frozen=True)
class FciLimits:
    """The FCI's joint-space limits of one robot model (Franka's "Control Interface Specification
    and Robot Limits"), per joint; velocities near the position limits follow
    dq <= -dq_offset + sqrt(2 ddq_dec (q_max - q)), mirrored toward q_min."""

    q_min: tuple[float, ...]
    q_max: tuple[float, ...]
    dq_max: tuple[float, ...]
    ddq_max: tuple[float, ...]
    dddq_max: tuple[float, ...]
    dq_offset: tuple[float, ...]
    ddq_dec: tuple[float, ...]


FR3_LIMITS = FciLimits(
    q_min=(-2.9007, -1.8361, -2.9007, -3.0770, -2.8763, 0.4398, -3.0508),
    q_max=(2.9007, 1.8361, 2.9007, -0.1169, 2.8763, 4.6216, 3.0508),
    dq_max=(2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26),
    ddq_max=(10.0,) * 7,
    dddq_max=(5000.0,) * 7,
    dq_offset=(0.6599, 0.2517, 0.2000, 0.3533, 0.5757, 0.4878, 0.4628),
    ddq_dec=(6.0, 2.585, 3.5, 4.0, 17.0, 5.5, 17.0),
)
FCI_LIMITS = {"franka_fr3": FR3_LIMITS}


def fci_margins(limits: FciLimits) -> tuple[np.ndarray, np.ndarray]:
    """The speeds and accelerations the shaper keeps to: libfranka's margin below each FCI limit,
    and for speed also what three lost packets at full acceleration add."""
    ddq = np.array(limits.ddq_max) - LIMIT_EPS
    return np.array(limits.dq_max) - LIMIT_EPS - LOST_PACKETS * DT * np.array(limits.ddq_max), ddq


def lowpass_gain(cutoff_hz: float, dt: float = DT) -> float:
    """libfranka's first-order low-pass gain; 1 (no filtering) at 1 kHz and above."""
    if cutoff_hz >= 1.0 / dt:
        return 1.0
    omega_dt = 2.0 * math.pi * cutoff_hz * dt
    return omega_dt / (omega_dt + 1.0)


def max_jerk_safe_cutoff(limits: FciLimits, dt: float = DT) -> float:
    """The highest cutoff at which the filter keeps an acceleration-limited stream jerk-limited."""
    gain = min((j - LIMIT_EPS) * dt / (2.0 * a) for j, a in zip(limits.dddq_max, limits.ddq_max))
    return gain / ((1.0 - gain) * 2.0 * math.pi * dt)


# -- settings ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FrankaSettings:
    """The `franka:` settings (config/robots/franka_fr3.yaml, driver parameters `franka.<key>`)."""

    ip: str
    realtime: str = "enforce"
    controller: str = "joint_impedance"
    lowpass_cutoff_hz: float = 50.0
    recover_errors: bool = True
    link_timeout_s: float = 0.05
    connect_timeout_s: float = 10.0
    gripper: bool = True
    gripper_homing: bool = False
    gripper_speed: float = 0.1
    gripper_force: float = 20.0

    @classmethod
    def parse(cls, robot: RobotSpec, limits: FciLimits, settings: Mapping[str, Any]) -> "FrankaSettings":
        """Validate; a bad value raises HardwareError naming `franka.<key>` and what was expected."""
        try:
            section = Section(dict(settings), "driver parameters", "franka")
            section.reject_unknown(cls.__dataclass_fields__)
            ip = section.raw("ip", "")
            try:
                ipaddress.IPv4Address(ip)
            except ValueError:
                raise section.error("ip", "the robot's FCI address, an IPv4 address (172.16.0.2 when the "
                                    "robot PC is wired to the Control's LAN port as Franka documents)", ip) from None
            ceiling = max_jerk_safe_cutoff(limits)
            cutoff = section.number("lowpass_cutoff_hz", cls.lowpass_cutoff_hz, positive=True)
            if cutoff > ceiling:
                raise section.error("lowpass_cutoff_hz", f"a cutoff of at most {ceiling:.1f} Hz: above it the "
                                    "filtered setpoints may exceed the FCI jerk limit", cutoff)
            gripper = robot.grippers[0] if robot.grippers else None
            max_speed = gripper.max_speed if gripper else cls.gripper_speed
            max_force = gripper.max_force if gripper else cls.gripper_force
            return cls(
                ip=ip,
                realtime=section.string("realtime", cls.realtime, choices=("enforce", "ignore")),
                controller=section.string("controller", cls.controller,
                                          choices=("joint_impedance", "cartesian_impedance")),
                lowpass_cutoff_hz=cutoff,
                recover_errors=section.boolean("recover_errors", cls.recover_errors),
                # At least ten robot cycles, at most what the driver's 100 ms budget allows.
                link_timeout_s=section.number("link_timeout_s", cls.link_timeout_s, minimum=0.01, maximum=0.1),
                connect_timeout_s=section.number("connect_timeout_s", cls.connect_timeout_s, minimum=1.0),
                gripper=section.boolean("gripper", cls.gripper),
                gripper_homing=section.boolean("gripper_homing", cls.gripper_homing),
                gripper_speed=section.number("gripper_speed", min(cls.gripper_speed, max_speed),
                                             positive=True, maximum=max_speed),
                gripper_force=section.number("gripper_force", min(cls.gripper_force, max_force),
                                             positive=True, maximum=max_force),
            )
        except ConfigError as error:
            raise HardwareError(str(error)) from None


def _import_sdk():
    try:
        import pylibfranka
    except ImportError as exc:
        raise HardwareError(f"backend franka needs Franka's Python bindings of libfranka, which are not "
                            f"installed ({exc}): pip install {SDK_PACKAGE}, or the project's drivers extra: "
                            "pip install .[drivers]") from exc
    return pylibfranka


# -- from the driver's setpoints to the robot's commands (pure numpy, run in the arm process) -------
class SetpointPlayer:
    """A jitter buffer: plays the driver's setpoints (numbered 0, 1, ... as written) one per
    robot cycle and in order; see the module docstring for what it does when the driver is late."""

    def __init__(self, position: np.ndarray, written: int = 0):
        self.extrapolated = self.held = self.skipped = self.drained = 0
        self.reset(position, written)

    def reset(self, position: np.ndarray, written: int) -> None:
        """Start from `position` at rest; setpoints numbered below `written` are old."""
        self.first = self.next = written
        self.last = np.array(position, dtype=float)
        self.velocity = np.zeros_like(self.last)
        self.driver_velocity = np.zeros_like(self.last)  # of the driver's setpoints where it plays them
        self.missed = 0
        self.playing = False

    def step(self, written: int, fetch: Callable[[int], np.ndarray]) -> np.ndarray:
        """The setpoint for this cycle; `written` setpoints exist, `fetch(n)` returns number n."""
        backlog = written - self.next
        if not self.playing and backlog <= PLAYOUT_DEPTH:
            return self.last  # filling the buffer: hold
        self.playing = True
        if backlog > MAX_BACKLOG:
            self.skipped += backlog - 1 - PLAYOUT_DEPTH
            self.next = written - 1 - PLAYOUT_DEPTH
        # Behind by more than the playout depth: drop setpoints that repeat the last one played.
        while written - self.next > 1 + PLAYOUT_DEPTH and np.array_equal(fetch(self.next), self.last):
            self.next += 1
            self.drained += 1
        if self.next < written:
            target = fetch(self.next)
            # The driver's own velocity there (not the jump a skip or a held gap makes).
            self.driver_velocity = (target - fetch(self.next - 1)) / DT if self.next > self.first else \
                np.zeros_like(target)
            self.next += 1
            self.missed = 0
        elif self.missed < EXTRAPOLATED_CYCLES:
            target = self.last + self.velocity * DT
            self.next += 1  # this slot is spent: its setpoint, if it still comes, is dropped
            self.missed += 1
            self.extrapolated += 1
        else:
            target = self.last  # the driver is silent: hold, and refill before playing again
            self.playing = False
            self.held += 1
        self.velocity = (target - self.last) / DT
        self.last = target
        return target


class SetpointShaper:
    """Low-pass filter, then the jerk / acceleration / velocity backstop; one `step()` per cycle."""

    def __init__(self, limits: FciLimits, cutoff_hz: float, position: np.ndarray):
        self.gain = lowpass_gain(cutoff_hz)
        self.q_min, self.q_max = np.array(limits.q_min), np.array(limits.q_max)
        self.dq_offset, self.ddq_dec = np.array(limits.dq_offset), np.array(limits.ddq_dec)
        self.dq, self.ddq = fci_margins(limits)
        self.dddq = np.array(limits.dddq_max) - LIMIT_EPS
        self.limited = 0  # cycles in which the backstop changed the filtered setpoint
        self.reset(position)

    def reset(self, position: np.ndarray) -> None:
        """Start at rest on `position` (the FCI wants q_c = q, dq_c = 0, ddq_c = 0 at the start)."""
        self.filtered = np.array(position, dtype=float)
        self.position = self.filtered.copy()
        self.velocity = np.zeros_like(self.position)
        self.acceleration = np.zeros_like(self.position)

    def velocity_bounds(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The FCI's velocity limits at q: rectangular, narrowing toward the position limits."""
        upper = -self.dq_offset + np.sqrt(np.maximum(0.0, 2.0 * self.ddq_dec * (self.q_max - q)))
        lower = self.dq_offset - np.sqrt(np.maximum(0.0, 2.0 * self.ddq_dec * (q - self.q_min)))
        return np.maximum(-self.dq, np.minimum(0.0, lower)), np.minimum(self.dq, np.maximum(0.0, upper))

    def reach(self, target: np.ndarray, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """How far, each way, the setpoints may yet go: the filter's output and the target, and where
        the driver stops if it brakes now (at its share of the acceleration) from `velocity`."""
        stop = target + velocity * np.abs(velocity) / (2.0 * DRIVER_ACCELERATION_SHARE * self.ddq)
        return np.minimum.reduce([stop, target, self.filtered]), np.maximum.reduce([stop, target, self.filtered])

    def at_rest(self) -> bool:
        return bool(np.all(np.abs(self.velocity) < 1e-4) and np.all(np.abs(self.acceleration) < 1e-2))

    def step(self, target: np.ndarray, velocity: np.ndarray | None = None) -> np.ndarray:
        """The command for this cycle toward `target`, a driver's setpoint moving at `velocity` (the
        driver's, default at rest). The command never runs past where the setpoints could stop: a
        gap closed after a late driver (a held setpoint, a skipped backlog) does not carry it on
        beyond the driver's own braking."""
        target = np.asarray(target, dtype=float)
        lowest, highest = self.reach(target, np.zeros_like(target) if velocity is None else velocity)
        filtered = self.filtered + self.gain * (target - self.filtered)
        reference_velocity = (filtered - self.filtered) / DT
        self.filtered = filtered
        # Zero while the command follows the filtered setpoint; otherwise close the gap as fast as
        # braking with the acceleration the driver leaves over allows (so it closes without
        # overshoot even while the setpoint itself brakes), landing on it within a cycle or two.
        # A driver at rest leaves more over: half the FCI's (more and the jerk limit's ramp
        # overshoots small gaps); the landing keeps the small steps the jerk limit can follow.
        gap = filtered - (self.position + reference_velocity * DT)
        landing = (1.0 - DRIVER_ACCELERATION_SHARE) * self.ddq
        moving = np.zeros(target.shape, dtype=bool) if velocity is None else np.asarray(velocity) != 0.0
        spare = np.where(moving, landing, AT_REST_CLOSING_SHARE * self.ddq)
        distance = np.abs(gap)
        correction = np.sign(gap) * np.maximum(np.sqrt(2.0 * spare * distance) - spare * DT,
                                               np.minimum(distance / DT, landing * DT))
        wanted = (reference_velocity + correction - self.velocity) / DT
        # Velocity limits first, as the acceleration from which braking at the jerk limit still
        # meets them; then jerk and acceleration, which therefore always hold.
        lower_v, upper_v = self.velocity_bounds(self.position)
        # Braking from the command's next position stops within the reach, at a share of the FCI's
        # acceleration between the driver's and the FCI's (the rest absorbs the jerk limit's ramp).
        brake = REACH_BRAKING_SHARE * self.ddq
        # REACH_SLACK leaves the landing to the gap's closing: the braking curve is too steep there.
        ahead = self.position + self.velocity * DT
        upper_v = np.minimum(upper_v, np.sqrt(2.0 * brake * np.maximum(0.0, highest + REACH_SLACK - ahead)))
        lower_v = np.maximum(lower_v, -np.sqrt(2.0 * brake * np.maximum(0.0, ahead - lowest + REACH_SLACK)))
        high = _signed_sqrt(2.0 * self.dddq * (upper_v - self.velocity))
        low = -_signed_sqrt(2.0 * self.dddq * (self.velocity - lower_v))
        acceleration = np.clip(wanted, low, np.maximum(high, low))
        acceleration = np.clip(acceleration, np.maximum(self.acceleration - self.dddq * DT, -self.ddq),
                               np.minimum(self.acceleration + self.dddq * DT, self.ddq))
        if np.any(np.abs(acceleration - wanted) > 1e-9):
            self.limited += 1
        self.acceleration = acceleration
        self.velocity = self.velocity + acceleration * DT
        self.position = self.position + self.velocity * DT
        return self.position.copy()


def _signed_sqrt(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.sqrt(np.abs(x))


# -- the shared mailboxes -----------------------------------------------------------------------------
class Phase:
    """What a helper process is doing, as it reports in its mailbox."""

    STARTING, IDLE, ACTIVE, FAULT, LOST, CLOSED = range(6)
    NAMES = ("starting", "idle", "active", "fault", "lost", "closed")


# Arm mailbox layout: scalars, then the 7-vectors.
A_SEQ, A_STAMP, A_PHASE, A_MODE, A_SUCCESS, A_LIMITED, A_EXTRAPOLATED, A_HELD, A_SKIPPED = range(9)
A_Q, A_DQ, A_TAU, A_Q_D = 9, 16, 23, 30  # A_Q_D: the command the robot last took, as it reports it
A_SIZE = 37
# Gripper mailbox layout.
G_STAMP, G_PHASE, G_WIDTH, G_MAX_WIDTH, G_GRASPED, G_BUSY, G_MOVES, G_FORCE = range(8)
G_SIZE = 8
TEXT_SIZE = 1024


class _Lock:
    """Excludes the other process (flock) and the other threads of this one."""

    def __init__(self, fd: int):
        self._fd = fd
        self._threads = threading.Lock()

    def __enter__(self):
        self._threads.acquire()
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()


class _Mailbox:
    """Shared memory of one helper process: a file in /dev/shm that it and the driver both map.
    It holds `values` (a layout above), the number of setpoints `written`, the setpoint `ring`
    and a `text` (why a process failed); `lock` guards all of it."""

    def __init__(self, path: str, size: int, fd: int | None = None):
        self.path = path
        self.fd = os.open(path, os.O_RDWR) if fd is None else fd
        floats = size + 1 + RING * 7
        total = floats * 8 + TEXT_SIZE
        if fd is not None:
            os.ftruncate(self.fd, total)
        self._map = mmap.mmap(self.fd, total)
        numbers = np.frombuffer(self._map, dtype=float, count=floats)
        self.values = numbers[:size]
        self._written = numbers[size:size + 1]
        self.ring = numbers[size + 1:].reshape(RING, 7)
        self._text = memoryview(self._map)[floats * 8:]
        self.lock = _Lock(self.fd)

    @classmethod
    def create(cls, size: int) -> "_Mailbox":
        fd, path = tempfile.mkstemp(prefix="r2s2r-franka-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        return cls(path, size, fd)

    @property
    def written(self) -> int:
        return int(self._written[0])

    @written.setter
    def written(self, value: int) -> None:
        self._written[0] = value

    def set_text(self, message: str) -> None:
        data = message.encode("utf-8", "replace")[:TEXT_SIZE - 1] + b"\0"
        with self.lock:
            self._text[:len(data)] = data

    def get_text(self) -> str:
        with self.lock:
            data = bytes(self._text)
        return data[:data.index(b"\0")].decode("utf-8", "replace")

    def unlink(self) -> None:
        """Remove the file; both mappings stay valid."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _helper_main() -> None:
    """Entry point of a helper process: `python -c ... <arm|gripper> <mailbox path> <socket fd>`."""
    role, path, fd = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = Connection(fd)
    config, limits = conn.recv()
    box = _Mailbox(path, A_SIZE if role == "arm" else G_SIZE)
    import pylibfranka as franka
    if role == "arm":
        _ArmServer(franka, FrankaSettings(**config), FciLimits(**limits), box, conn).run()
    else:
        _run_gripper(franka, FrankaSettings(**config), box, conn)


# -- the arm process ------------------------------------------------------------------------------------
class _ArmServer:
    """Owns pylibfranka.Robot until told to stop, the driver goes away or the link dies."""

    def __init__(self, franka, config: FrankaSettings, limits: FciLimits, box: _Mailbox, conn):
        self.franka, self.config, self.limits, self.box, self.conn = franka, config, limits, box, conn
        self.values, self.ring = box.values, box.ring
        self.robot = None
        self.control = None
        self.phase = Phase.STARTING
        self.player: SetpointPlayer | None = None
        self.shaper: SetpointShaper | None = None

    def run(self) -> None:
        try:
            if self._open():
                self._loop()
        except self.franka.NetworkException as exc:
            self._fail(Phase.LOST, f"network: {exc}")
        except Exception as exc:  # whatever else libfranka raises ends this process: report it
            self._fail(Phase.LOST, f"{type(exc).__name__}: {exc}")
        finally:
            if self.phase not in (Phase.LOST, Phase.FAULT):
                self._set_phase(Phase.CLOSED)

    def _open(self) -> bool:
        franka = self.franka
        realtime = (franka.RealtimeConfig.kEnforce if self.config.realtime == "enforce"
                    else franka.RealtimeConfig.kIgnore)
        try:
            self.robot = franka.Robot(self.config.ip, realtime)
        except franka.NetworkException as exc:
            return self._refuse("network", f"cannot connect to the robot at {self.config.ip}: {exc}")
        except franka.RealtimeException as exc:
            return self._refuse("config", f"{exc} Install a PREEMPT_RT kernel on the robot PC (see "
                                "docs/hardware/franka.md), or set franka.realtime: ignore for a simulator")
        except Exception as exc:  # IncompatibleVersionException arrives as FrankaException
            return self._refuse("config", f"{type(exc).__name__}: {exc}")
        state = self.robot.read_once()
        if state.robot_mode == franka.RobotMode.Reflex:
            if not self.config.recover_errors:
                return self._refuse("fault", f"the robot is in reflex mode ({state.current_errors}); "
                                    "clear it in Desk or set franka.recover_errors: true")
            self.robot.automatic_error_recovery()
            state = self.robot.read_once()
        if self.config.realtime == "enforce":
            try:  # libfranka's own checks passed; the 1 kHz loop of this process gets the CPU first
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(os.sched_get_priority_max(os.SCHED_FIFO)))
            except OSError as exc:
                return self._refuse("config", f"cannot give the arm process real-time priority ({exc}); allow "
                                    "it with an rtprio limit (see docs/hardware/franka.md)")
        self.player = SetpointPlayer(np.array(state.q))
        self.shaper = SetpointShaper(self.limits, self.config.lowpass_cutoff_hz, np.array(state.q))
        self._publish(state)
        self._set_phase(Phase.IDLE)
        self.conn.send(("ready", {"libfranka": franka.__version__, "robot_mode": state.robot_mode.name}))
        return True

    def _refuse(self, kind: str, message: str) -> bool:
        self._fail(Phase.LOST, message)
        self.conn.send(("error", kind, message))
        return False

    def _loop(self) -> None:
        franka = self.franka
        while True:
            if self.conn.poll():
                try:
                    request = self.conn.recv()
                except EOFError:  # the driver is gone: stop the motion and leave
                    request = ("stop",)
                if not self._handle(request):
                    return
            if self.control is None:
                self._publish(self.robot.read_once())
                continue
            try:
                state, _ = self.control.readOnce()
                with self.box.lock:
                    target = self.player.step(self.box.written, self._fetch)
                    self._publish_locked(state)
                self.control.writeOnce(franka.JointPositions(self.shaper.step(target, self.player.driver_velocity).tolist()))
            except franka.ControlException as exc:  # a reflex ended the motion; the robot holds
                self.control = None
                self._fail(Phase.FAULT, f"reflex: {exc}")

    def _fetch(self, number: int) -> np.ndarray:
        return self.ring[number % RING].copy()

    def _handle(self, request) -> bool:
        """Carry out one request from the driver and reply; False: leave the loop."""
        name = request[0]
        try:
            if name == "activate":
                self._activate()
            elif name == "deactivate":
                self._finish_motion()
            elif name == "recover":
                self._finish_motion()
                self.robot.automatic_error_recovery()
                self._set_phase(Phase.IDLE)
            elif name == "stop":
                self._finish_motion()
                self.conn.send(("ok", {}))
                return False
            else:
                raise ValueError(f"unknown request {name!r}")
        except self.franka.ControlException as exc:  # a reflex while starting or ending the motion
            self.control = None
            self._fail(Phase.FAULT, f"reflex: {exc}")
            self.conn.send(("error", "fault", f"{name}: reflex: {exc}"))
            return True
        except (self.franka.CommandException, self.franka.InvalidOperationException, ValueError) as exc:
            self.conn.send(("error", "command", f"{name}: {exc}"))
            return True
        self.conn.send(("ok", {}))
        return True

    def _activate(self) -> None:
        if self.control is not None:
            return
        mode = (self.franka.ControllerMode.JointImpedance if self.config.controller == "joint_impedance"
                else self.franka.ControllerMode.CartesianImpedance)
        self.control = self.robot.start_joint_position_control(mode)
        state, _ = self.control.readOnce()
        position = np.array(state.q)
        with self.box.lock:
            self.player.reset(position, self.box.written)
            self._publish_locked(state)
        self.shaper.reset(position)
        self.control.writeOnce(self.franka.JointPositions(position.tolist()))
        self._set_phase(Phase.ACTIVE)

    def _finish_motion(self) -> None:
        """Bring the command to rest on the last setpoint, then end the motion as the FCI wants."""
        if self.control is None:
            return
        hold = self.player.last.copy()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        command = self.shaper.position
        while True:
            state, _ = self.control.readOnce()
            self._publish(state)
            command = self.shaper.step(hold)
            if self.shaper.at_rest() or time.monotonic() > deadline:
                break
            self.control.writeOnce(self.franka.JointPositions(command.tolist()))
        last = self.franka.JointPositions(command.tolist())
        last.motion_finished = True
        self.control.writeOnce(last)
        self.control = None
        self._publish(self.robot.read_once())  # the mode after the motion, before the driver hears back
        self._set_phase(Phase.IDLE)

    def _publish(self, state) -> None:
        with self.box.lock:
            self._publish_locked(state)

    def _publish_locked(self, state) -> None:
        v = self.values
        v[A_Q:A_Q + 7] = state.q
        v[A_DQ:A_DQ + 7] = state.dq
        v[A_TAU:A_TAU + 7] = state.tau_J
        v[A_Q_D:A_Q_D + 7] = state.q_d
        v[A_MODE] = int(state.robot_mode.value)
        v[A_SUCCESS] = state.control_command_success_rate
        v[A_LIMITED] = self.shaper.limited
        v[A_EXTRAPOLATED], v[A_HELD], v[A_SKIPPED] = self.player.extrapolated, self.player.held, self.player.skipped
        v[A_STAMP] = time.monotonic()
        v[A_SEQ] += 1

    def _set_phase(self, phase: int) -> None:
        self.phase = phase
        with self.box.lock:
            self.values[A_PHASE] = phase

    def _fail(self, phase: int, message: str) -> None:
        self.box.set_text(message)
        self._set_phase(phase)


# -- the gripper process ------------------------------------------------------------------------------
def _run_gripper(franka, config: FrankaSettings, box: _Mailbox, conn) -> None:
    """Body of the gripper process: owns pylibfranka.Gripper; runs the newest opening command."""
    values = box.values

    def publish(state) -> None:
        with box.lock:
            values[G_WIDTH], values[G_MAX_WIDTH] = state.width, state.max_width
            values[G_GRASPED] = float(state.is_grasped)
            values[G_PHASE] = Phase.IDLE
            values[G_STAMP] = time.monotonic()

    def fail(message: str) -> None:
        box.set_text(message)
        with box.lock:
            values[G_PHASE] = Phase.LOST

    try:
        try:
            gripper = franka.Gripper(config.ip)
        except Exception as exc:
            message = f"cannot connect to the Franka Hand at {config.ip}: {exc}"
            fail(message)
            conn.send(("error", "network", message))
            return
        if config.gripper_homing:
            gripper.homing()
        publish(gripper.read_once())
        conn.send(("ready", {"gripper_server": gripper.server_version()}))
        while True:
            command = None
            if conn.poll(GRIPPER_POLL_S):
                try:
                    while conn.poll():  # only the newest command counts
                        command = conn.recv()
                except EOFError:
                    return
                if command is None:
                    return  # stop
            if command is not None:
                opening, force = command
                with box.lock:
                    values[G_BUSY] = 1.0
                    width = values[G_WIDTH]
                try:
                    if opening < width - GRIPPER_TOLERANCE:  # closing: grasp whatever is in between
                        gripper.grasp(opening, config.gripper_speed, force, GRASP_EPSILON_INNER,
                                      GRASP_EPSILON_OUTER)
                        with box.lock:
                            values[G_FORCE] = force
                    else:
                        gripper.move(opening, config.gripper_speed)
                except franka.CommandException as exc:  # e.g. blocked fingers: reported, not fatal
                    box.set_text(f"gripper command {opening:.4f} m failed: {exc}")
                with box.lock:
                    values[G_BUSY] = 0.0
                    values[G_MOVES] += 1
            publish(gripper.read_once())
    except Exception as exc:
        fail(f"Franka Hand: {type(exc).__name__}: {exc}")


# -- the driver's side of one helper process ------------------------------------------------------------
class _Helper:
    """The driver's side of one helper process (a plain subprocess: nothing of the driver's own
    `__main__` is re-run, and terminal signals stay with the driver)."""

    def __init__(self, role: str, size: int, config: dict, limits: dict):
        self.name = role
        self.box = _Mailbox.create(size)
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = "from r2s2r.hardware.franka import _helper_main; _helper_main()"
        try:
            self.process = subprocess.Popen([sys.executable, "-c", code, role, self.box.path, str(theirs.fileno())],
                                            pass_fds=(theirs.fileno(),), env=env, start_new_session=True)
        except OSError:
            ours.close()
            self.box.unlink()
            os.close(self.box.fd)
            raise
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send((config, limits))
        self.values, self.ring = self.box.values, self.box.ring
        self.facts: dict[str, Any] = {}
        self.lock = threading.Lock()  # one request at a time (the driver's services run on other threads)

    def wait_ready(self, timeout_s: float, ip: str) -> None:
        reply = self._reply(timeout_s)
        self.box.unlink()  # the process has mapped it, or is never going to
        if reply is None:
            raise LinkLost(f"{self.name}: no answer from {ip} within {timeout_s:g} s "
                           "(is the robot on and reachable, FCI activated in Desk?)")
        if reply[0] == "ready":
            self.facts = reply[1]
            return
        _kind, message = reply[1], reply[2]
        raise (LinkLost if _kind == "network" else HardwareError)(message)

    def request(self, *request, timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
        with self.lock:
            try:
                self.conn.send(request)
            except OSError:
                raise LinkLost(f"{self.name} process is gone: {self.box.get_text() or 'no reason given'}") from None
            reply = self._reply(timeout_s)
        if reply is None:
            raise LinkLost(f"{self.name}: no reply to {request[0]} within {timeout_s:g} s")
        if reply[0] == "error":
            raise (LinkLost if reply[1] == "network" else HardwareError)(reply[2])
        return reply[1]

    def send(self, message) -> None:
        """Fire and forget (gripper commands)."""
        try:
            self.conn.send(message)
        except OSError:
            raise LinkLost(f"{self.name} process is gone: {self.box.get_text() or 'no reason given'}") from None

    def _reply(self, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.conn.poll(min(0.05, max(0.0, deadline - time.monotonic()))):
                try:
                    return self.conn.recv()
                except EOFError:
                    return ("error", "network", f"{self.name} process ended: {self.box.get_text() or 'no reason'}")
            if not self.alive:
                return ("error", "network", f"{self.name} process ended: {self.box.get_text() or 'no reason'}")
        return None

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, grace_s: float) -> None:
        """Ask the process to stop (ending a motion smoothly), then make sure it is gone."""
        if self.alive:
            try:
                self.conn.send(("stop",) if self.name == "arm" else None)
            except OSError:
                pass
            self._wait(grace_s)
        for end in (self.process.terminate, self.process.kill):  # stuck waiting on a dead link
            if self.alive:
                end()
                self._wait(1.0)
        self.conn.close()
        self.box.unlink()
        os.close(self.box.fd)

    def _wait(self, timeout_s: float) -> None:
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass


# -- the backend --------------------------------------------------------------------------------------
class FrankaReflex(LinkLost):
    """The robot aborted the motion (a reflex); handled like a lost link: hold, report, reconnect."""


class FrankaHardware(Hardware):
    backend = "franka"
    required_control_rate_hz = 1000.0  # one setpoint per FCI cycle (see the module docstring)

    def __init__(self, robot: RobotSpec, settings: Mapping[str, Any] | None = None):
        super().__init__(robot, settings)
        if robot.name not in FCI_LIMITS:
            raise HardwareError(f"backend franka has no FCI limits for robot {robot.name}; known: "
                                f"{', '.join(FCI_LIMITS)}")
        self.limits = FCI_LIMITS[robot.name]
        self.config = FrankaSettings.parse(robot, self.limits, self.settings)
        self.link_timeout_s = self.config.link_timeout_s
        if len(robot.joint_names) != 7 or len(robot.grippers) > 1:
            raise HardwareError(f"backend franka drives a 7-joint arm with at most one Franka Hand; robot "
                                f"{robot.name} has {len(robot.joint_names)} joints and {len(robot.grippers)} grippers")
        self._gripper_spec = robot.grippers[0] if robot.grippers else None
        self._use_gripper = self.config.gripper and self._gripper_spec is not None
        self._names = robot.joint_names + robot.gripper_joint_names
        self._arm: _Helper | None = None
        self._hand: _Helper | None = None
        self._gripper_sent: float | None = None
        self._gripper_force_sent = float("nan")
        self._homed = False
        self._sdk_version = ""

    # -- the lifecycle ---------------------------------------------------------------------------
    def on_configure(self) -> None:
        franka = _import_sdk()
        self._close_helpers(grace_s=0.5)
        self.state = Lifecycle.UNCONFIGURED
        config = asdict(self.config)
        # Home the Hand on the first connect only: a reconnect must not drop what it holds.
        config["gripper_homing"] = self.config.gripper_homing and not self._homed
        try:
            self._arm = _Helper("arm", A_SIZE, config, asdict(self.limits))
            if self._use_gripper:
                self._hand = _Helper("gripper", G_SIZE, config, asdict(self.limits))
            self._arm.wait_ready(self.config.connect_timeout_s, self.config.ip)
            if self._hand is not None:
                self._hand.wait_ready(self.config.connect_timeout_s, self.config.ip)
                self._homed = True
        except BaseException:
            self._close_helpers(grace_s=0.5)
            raise
        self._sdk_version = franka.__version__
        self.state = Lifecycle.INACTIVE

    def on_activate(self) -> None:
        if self.state is Lifecycle.ACTIVE:
            return
        self._arm_values()  # raises if the link is gone
        self._arm.request("activate")
        self._gripper_sent = None
        self.state = Lifecycle.ACTIVE

    def on_deactivate(self) -> None:
        if self.state is not Lifecycle.ACTIVE:
            return
        self._arm.request("deactivate")
        self.state = Lifecycle.INACTIVE

    def on_cleanup(self) -> None:
        self._close_helpers(grace_s=STOP_TIMEOUT_S + 0.5)
        self.state = Lifecycle.FINALIZED

    def reset(self) -> None:
        """Clears a pending reflex with libfranka's automatic error recovery; moves nothing."""
        if self._arm is None:
            raise HardwareError("reset(): the franka backend is not connected")
        values = self._snapshot(self._arm)
        if values[A_PHASE] == Phase.FAULT or int(values[A_MODE]) == _ROBOT_MODE_REFLEX:
            self._arm.request("recover", timeout_s=10.0)
            self.state = Lifecycle.INACTIVE

    # -- the control cycle -------------------------------------------------------------------------
    def read(self) -> JointSample:
        values = self._arm_values()
        nan = np.full(len(self.robot.gripper_joint_names), np.nan)
        fingers = nan
        if self._use_gripper:
            width = self._gripper_width()
            fingers = np.full(len(self._gripper_spec.joints), width / len(self._gripper_spec.joints))
        return JointSample(stamp=float(values[A_STAMP]), names=self._names,
                           position=np.concatenate([values[A_Q:A_Q + 7], fingers]),
                           velocity=np.concatenate([values[A_DQ:A_DQ + 7], nan]),
                           effort=np.concatenate([values[A_TAU:A_TAU + 7], nan]))

    def write(self, command: JointCommand, gripper_openings: np.ndarray,
              gripper_forces: np.ndarray | None = None) -> None:
        self._arm_values()
        if self.state is not Lifecycle.ACTIVE:
            return  # inactive: the robot holds where it is
        if command.names != self.robot.joint_names:
            raise HardwareError(f"franka write(): setpoints are for {list(command.names)}; expected "
                                f"{', '.join(self.robot.joint_names)} (the FCI's joint order)")
        box = self._arm.box
        with box.lock:
            n = box.written
            box.ring[n % RING] = command.position
            box.written = n + 1
        if self._use_gripper and len(gripper_openings):
            opening = float(np.clip(gripper_openings[0], *self._gripper_spec.opening_range))
            force = grip_force(gripper_forces, 0, self.config.gripper_force)
            if self._gripper_sent is None:
                # What the controller held at activation moves nothing.
                self._gripper_sent, self._gripper_force_sent = opening, force
            elif abs(opening - self._gripper_sent) > GRIPPER_TOLERANCE or force != self._gripper_force_sent:
                self._gripper_width()  # raises if the Hand's link is gone
                self._hand.send((opening, force))  # a new force alone grasps again with it
                self._gripper_sent, self._gripper_force_sent = opening, force

    def commanded_position(self) -> np.ndarray:
        """The joint positions the robot reports it was last commanded (libfranka's q_d): what
        reached the FCI after the arm process's player, low-pass and limiter."""
        return self._arm_values()[A_Q_D:A_Q_D + 7].copy()

    # -- diagnostics ---------------------------------------------------------------------------------
    def command_limits(self, limits):
        """`limits` narrowed to what the FCI takes without the arm process's shaper having to act:
        speeds within the shaper's margins below the FCI's, accelerations at
        DRIVER_ACCELERATION_SHARE of them (the rest is the shaper's), and braking toward a
        position limit at the FCI's ddq_dec. The FCI's speed bound near a limit, sqrt(2 ddq_dec d)
        - dq_offset, lies below that braking curve by dq_offset; the command range is narrowed by
        the distance that makes up for it at full speed, so the curve never asks for more."""
        fci = self.limits
        speed, acceleration = fci_margins(fci)
        velocity = np.minimum(limits.velocity, speed)
        acceleration = np.minimum(limits.acceleration, DRIVER_ACCELERATION_SHARE * acceleration)
        deceleration = np.minimum(acceleration, fci.ddq_dec)
        offset = np.array(fci.dq_offset)
        margin = ((velocity + offset) ** 2 - velocity ** 2) / (2 * deceleration) + LIMIT_EPS
        lower = np.maximum(limits.lower, np.array(fci.q_min) + margin)
        upper = np.minimum(limits.upper, np.array(fci.q_max) - margin)
        return replace(limits, lower=lower, upper=upper, velocity=velocity, acceleration=acceleration,
                       limit_deceleration=deceleration)

    def describe(self) -> dict[str, Any]:
        facts = {**super().describe(), "ip": self.config.ip, "sdk": f"{SDK_PACKAGE} {self._sdk_version}",
                 "realtime": self.config.realtime, "controller": self.config.controller,
                 "control": "joint position, 1 kHz active control (readOnce/writeOnce)",
                 "lowpass_cutoff_hz": self.config.lowpass_cutoff_hz, "link_timeout_s": self.link_timeout_s}
        if self._arm is not None:
            v = self._snapshot(self._arm)
            facts.update(arm_process=Phase.NAMES[int(v[A_PHASE])], robot_mode=_robot_mode_name(int(v[A_MODE])),
                         command_success_rate=round(float(v[A_SUCCESS]), 4), state_age_ms=round(
                             1000.0 * (time.monotonic() - v[A_STAMP]), 1),
                         setpoints_limited=int(v[A_LIMITED]), setpoints_extrapolated=int(v[A_EXTRAPOLATED]),
                         setpoints_held=int(v[A_HELD]), setpoints_skipped=int(v[A_SKIPPED]))
            text = self._arm.box.get_text()
            if text:
                facts["arm_fault"] = text
        if self._hand is not None:
            g = self._snapshot(self._hand)
            facts.update(gripper_process=Phase.NAMES[int(g[G_PHASE])], gripper_width_m=round(float(g[G_WIDTH]), 5),
                         gripper_max_width_m=round(float(g[G_MAX_WIDTH]), 5), gripper_grasped=bool(g[G_GRASPED]),
                         gripper_moving=bool(g[G_BUSY]), gripper_commands=int(g[G_MOVES]),
                         gripper_last_grasp_force_n=round(float(g[G_FORCE]), 2),
                         gripper_server=self._hand.facts.get("gripper_server"))
            text = self._hand.box.get_text()
            if text:
                facts["gripper_fault"] = text
        elif self._gripper_spec is not None:
            facts["gripper"] = "not used (franka.gripper: false)"
        return facts

    # -- helpers --------------------------------------------------------------------------------------
    @staticmethod
    def _snapshot(helper: _Helper) -> np.ndarray:
        with helper.box.lock:
            return helper.values.copy()

    def _arm_values(self) -> np.ndarray:
        """The newest arm state; LinkLost (or FrankaReflex) when there is none to trust."""
        if self._arm is None:
            raise LinkLost("the franka backend is not connected (connect it: on_configure)")
        values = self._snapshot(self._arm)
        phase = int(values[A_PHASE])
        if phase == Phase.FAULT:
            raise FrankaReflex(f"robot at {self.config.ip}: {self._arm.box.get_text()}")
        if phase in (Phase.LOST, Phase.CLOSED) or not self._arm.alive:
            raise LinkLost(f"robot at {self.config.ip}: {self._arm.box.get_text() or 'arm process ended'}")
        age = time.monotonic() - values[A_STAMP]
        if age > self.link_timeout_s:
            raise LinkLost(f"robot at {self.config.ip}: no state for {1000.0 * age:.0f} ms "
                           f"(link_timeout_s {self.link_timeout_s:g})")
        return values

    def _gripper_width(self) -> float:
        values = self._snapshot(self._hand)
        if int(values[G_PHASE]) in (Phase.LOST, Phase.CLOSED) or not self._hand.alive:
            raise LinkLost(f"Franka Hand at {self.config.ip}: {self._hand.box.get_text() or 'gripper process ended'}")
        return float(values[G_WIDTH])

    def _close_helpers(self, grace_s: float) -> None:
        # A helper whose link is already gone would only wait out libfranka's timeouts.
        lost = False
        if self._arm is not None:
            values = self._snapshot(self._arm)
            lost = (not self._arm.alive or values[A_PHASE] >= Phase.FAULT
                    or time.monotonic() - values[A_STAMP] > self.link_timeout_s)
        for helper in (self._hand, self._arm):
            if helper is not None:
                helper.close(0.2 if lost else grace_s)
        self._arm = self._hand = None


_ROBOT_MODE_REFLEX = 4  # pylibfranka.RobotMode.Reflex
_ROBOT_MODES = ("other", "idle", "move", "guiding", "reflex", "user_stopped", "automatic_error_recovery")


def _robot_mode_name(value: int) -> str:
    return _ROBOT_MODES[value] if 0 <= value < len(_ROBOT_MODES) else str(value)
