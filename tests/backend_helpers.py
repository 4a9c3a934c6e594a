"""Shared by the hardware backend tests and the tests of the emulators they run against: an
active backend in a ControlLoop, targets streamed through it on the wall clock as the driver
streams them, the arrival check those streams stop on, a seeded hostile client and what it must
leave behind at the SDK (at rest after silence, stopped and still after an estop), the checks
that a backend imports without its SDK."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:  # r2s2r is imported where it is used: the emulator tests import this module without it
    from r2s2r.contract.types import JointSample
    from r2s2r.hardware.base import Hardware
    from r2s2r.hardware.loop import ControlLoop
    from r2s2r.robots import RobotSpec

REPO = Path(__file__).resolve().parents[1]


def active_loop(hw: Hardware, control_rate_hz: float | None = None) -> ControlLoop:
    """`hw` connected and active, in a ControlLoop at `control_rate_hz` (default: the robot's)."""
    from r2s2r.hardware.loop import ControlLoop

    hw.on_configure()
    hw.on_activate()
    return ControlLoop(hw, control_rate_hz)


def stream(loop: ControlLoop, seconds: float, target: np.ndarray | dict | None = None,
           until: Callable[[JointSample], bool] | None = None,
           each_cycle: Callable[[], None] | None = None) -> list[JointSample]:
    """Cycle `loop` at its control rate for up to `seconds` of wall time, commanding `target` every
    cycle as a streaming client does (the controller's watchdog stops a target that is not
    refreshed); returns the samples the cycles read. `target` holds all the robot's joints, or is
    {group: positions}. `each_cycle()` runs after each cycle; the stream stops early once
    `until(sample)` holds. Like the driver, it keeps to its schedule and starts it afresh when a
    stall leaves it more than ten cycles behind, rather than catching up in a burst."""
    groups = _by_group(loop.robot, target)
    samples = []
    next_cycle = time.monotonic()
    end = next_cycle + seconds
    while time.monotonic() < end:
        for group, positions in groups.items():
            loop.controller.command_positions(group, positions, loop.hardware.now)
        loop.cycle()
        samples.append(loop.last_sample)
        if each_cycle is not None:
            each_cycle()
        if until is not None and until(loop.last_sample):
            break
        next_cycle += loop.dt
        delay = next_cycle - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -10 * loop.dt:
            next_cycle = time.monotonic()
    return samples


def _by_group(robot: RobotSpec, target) -> dict:
    if target is None or isinstance(target, dict):
        return target or {}
    target = np.asarray(target)
    return {group.name: target[[robot.joint_names.index(j) for j in group.joints]] for group in robot.groups}


def arrived(target, tol: float) -> Callable[[JointSample], bool]:
    """Whether a sample's joints (which come before its fingers) are all within `tol` of `target`."""
    target = np.asarray(target)
    return lambda sample: np.max(np.abs(sample.position[:target.size] - target)) < tol


def check_imports_without(backend: str, *sdk_modules: str) -> None:
    """`import backend` in a fresh interpreter loads none of `sdk_modules`: a backend imports its
    SDK only in connect(), so it loads, and checks its settings, where the SDK is not installed."""
    subprocess.run([sys.executable, "-c", "; ".join(_import_without(backend, sdk_modules))], check=True)


def run_on_the_shim(backend: str, sdk: str, robot: str, settings: dict) -> list[str]:
    """In a fresh interpreter with tests/standins/shim first on the path: import `backend`
    ("module.Class") and check that `sdk` is not imported yet, then connect, activate and read the
    robot through the stand-in the shim puts under `sdk`'s name. Returns what that process
    printed: the name of the module behind `sdk`, and the first joint read."""
    module, backend_class = backend.rsplit(".", 1)
    code = "; ".join([
        *_import_without(module, (sdk,)),
        "from r2s2r.robots import get_robot",
        f"hw = backend.{backend_class}(get_robot({robot!r}), {settings!r})",
        f"hw.on_configure(); hw.on_activate(); print(sys.modules[{sdk!r}].__name__, hw.read().names[0]); hw.on_cleanup()"])
    path = [REPO / "tests" / "standins" / "shim", REPO, REPO / "src"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _import_without(module: str, sdk_modules) -> list[str]:
    return [f"import sys, {module} as backend",
            f"assert all(m not in sys.modules for m in {tuple(sdk_modules)!r}), 'SDK imported eagerly'"]


# -- a hostile client, and what it must leave behind at the SDK ------------------------------------------
COMMAND_PERIOD_S = 0.01  # the hostile client sends a round of commands every 10 ms
STREAM_S = 2.0  # how long the hostile stream lasts
BURST_S = 0.4  # a valid far target streamed this long before the estop, so the estop meets a moving arm
HOLD_S = 1.0  # how long a stopped arm is watched for staying still
SETTLE_CYCLES = 5  # control cycles allowed beyond a computed stopping time (rounding, the last creep)
MIN_SETPOINTS = 5  # a check that sees fewer setpoints at the peer than this checks nothing: it fails


@dataclass(frozen=True)
class HostileCommand:
    """One command of a hostile client. `channel`: "positions", "trajectory" or "gripper";
    `target`: the group or gripper it is for (or a name the robot lacks); `kind`: what makes it
    hostile ("far", "nan", "short", ...); `valid`: whether a correct command path takes it.
    `values`: the positions, the trajectory's points (one row each) or the gripper opening;
    a trajectory also carries its joint `names` and each point's `times` (time_from_start)."""

    channel: str
    target: str
    kind: str
    valid: bool
    values: np.ndarray
    names: tuple[str, ...] = ()
    times: tuple[float, ...] = ()


def hostile_round(robot: RobotSpec, rng: np.random.Generator, trajectories: bool = True,
                  wire: bool = False, limits=None, reach=None) -> list[HostileCommand]:
    """One round of a seeded hostile client: a command for every group (now and then a trajectory,
    when `trajectories`) and now and then one for each gripper; about half of them valid, the
    valid ones anywhere within the joint limits (huge jumps included): `limits`' range, the one the
    backend takes commands in (default the robot's), or the (lower, upper) box `reach` within it
    (robot.joint_names order; a region the arm cannot collide in). `wire`: also messages only
    DDS can carry (trajectory points whose length differs from the joint names')."""
    commands = []
    limits = robot.limits if limits is None else limits
    reach = (limits.lower, limits.upper) if reach is None else reach
    for group in robot.groups:
        index = [robot.joint_names.index(j) for j in group.joints]
        box = (reach[0][index], reach[1][index])
        if trajectories and rng.random() < 0.2:
            commands.append(_hostile_trajectory(group, box, limits.upper[index], rng, wire))
        else:
            commands.append(_hostile_positions(group, box, limits.upper[index], rng))
    for gripper in robot.grippers:
        if rng.random() < 0.3:
            commands.append(_hostile_gripper(gripper, rng))
    return commands


_VALID_POSITIONS = ("far", "far", "edge", "middle")
_INVALID_POSITIONS = ("nan", "inf", "short", "long", "empty", "outside", "huge", "unknown_group")


def _hostile_positions(group, box, upper_limit, rng) -> HostileCommand:
    """Valid values within `box` (lower, upper); an "outside" one beyond `upper_limit`."""
    n = len(group.joints)
    lower, upper = box
    kind = str(rng.choice(_VALID_POSITIONS + _INVALID_POSITIONS))
    far = rng.uniform(lower, upper)
    one = np.arange(n) == rng.integers(n)  # the joint a single bad value goes to
    values = {
        "far": far,
        "edge": np.where(rng.random(n) < 0.5, lower, upper),  # exactly on the limits: valid
        "middle": np.clip((lower + upper) / 2 + rng.uniform(-0.3, 0.3, n), lower, upper),
        "nan": np.where(one, math.nan, far),
        "inf": np.where(one, -math.inf, far),
        "short": far[:max(n - 2, 1)],
        "long": np.concatenate([far, far[:3]]),
        "empty": np.empty(0),
        "outside": np.where(one, upper_limit + 0.5, far),
        "huge": np.full(n, 1e9),
        "unknown_group": far,
    }[kind]
    target = f"{group.name}_typo" if kind == "unknown_group" else group.name
    return HostileCommand("positions", target, kind, kind in _VALID_POSITIONS, values)


def _hostile_trajectory(group, box, upper_limit, rng, wire: bool) -> HostileCommand:
    lower, upper = box
    kinds = ["valid", "valid", "nan_point", "unknown_joint", "missing_joint", "outside", "times_backwards",
             "negative_time"] + (["ragged"] if wire else [])
    kind = str(rng.choice(kinds))
    names = list(group.joints)
    order = rng.permutation(len(names))  # any joint order is valid, as in joint_trajectory_controller
    names = [names[i] for i in order]
    points = rng.uniform(lower, upper, size=(2, len(names)))[:, order]
    times = (0.15, 0.3)
    if kind == "nan_point":
        points[1, rng.integers(len(names))] = math.nan
    elif kind == "unknown_joint":
        names[rng.integers(len(names))] = "not_a_joint"
    elif kind == "missing_joint":
        names, points = names[:-1], points[:, :-1]
    elif kind == "outside":
        points[0, 0] = upper_limit[order[0]] + 0.5
    elif kind == "times_backwards":
        times = (0.3, 0.15)
    elif kind == "negative_time":
        times = (-0.1, 0.3)
    values = [list(points[0]), list(points[1][:-1])] if kind == "ragged" else points
    # A subset of the joints is a valid goal: the others hold (joint_trajectory_controller's partial goals).
    valid = kind in ("valid", "missing_joint")
    return HostileCommand("trajectory", group.name, kind, valid, values, tuple(names), times)


def _hostile_gripper(gripper, rng) -> HostileCommand:
    lo, hi = gripper.opening_range
    kind = str(rng.choice(["valid", "valid", "two_values", "nan", "too_wide", "negative", "unknown_gripper"]))
    opening = rng.uniform(lo, hi)
    values = {"valid": [opening], "two_values": [opening, opening], "nan": [math.nan], "too_wide": [hi + 0.05],
              "negative": [lo - 0.05], "unknown_gripper": [opening]}[kind]
    target = f"{gripper.name}_typo" if kind == "unknown_gripper" else gripper.name
    return HostileCommand("gripper", target, kind, kind == "valid", np.array(values))


def send_to_controller(controller, command: HostileCommand, now: float) -> str | None:
    """Hand `command` to a JointController as the driver does; the CommandError's message, or None
    when it was taken."""
    from r2s2r.contract.types import CommandError
    try:
        if command.channel == "positions":
            controller.command_positions(command.target, command.values, now)
        elif command.channel == "trajectory":
            controller.command_trajectory(command.target, command.names, 0.0, command.times, command.values,
                                          None, None, now)
        else:
            controller.command_gripper(command.target, command.values, now)
    except CommandError as error:
        return str(error)
    return None


@dataclass
class PeerLog:
    """How a backend test reads the setpoints that reached the SDK or protocol peer.

    `sent()`: per robot joint (robot.joint_names order), the host monotonic times and positions
    (rad) of the setpoints the peer received. `resolution`: the smallest change the protocol
    carries (a Dynamixel tick, fp32's step at a few radians ...): setpoints that differ by less are
    the same setpoint. `delivery_s`: the longest a setpoint may take from write() to the peer
    (throttled sends, sender threads, a filter's lag on a busy host). `carry_s`: how long the
    path to the peer may carry a setpoint on at its last speed (libfranka extrapolates lost
    packets). `poll()`: called after every cycle, for a peer read by sampling it."""

    sent: Callable[[], list[tuple[np.ndarray, np.ndarray]]]
    resolution: float
    delivery_s: float = 0.2
    carry_s: float = 0.0
    poll: Callable[[], None] | None = None


def by_joint(times, positions) -> list[tuple[np.ndarray, np.ndarray]]:
    """A log of whole setpoints (one row per send) as PeerLog.sent's per-joint series."""
    times, positions = np.asarray(times, float), np.asarray(positions, float).reshape(len(times), -1)
    return [(times, positions[:, j]) for j in range(positions.shape[1])]


@dataclass
class HostileRecord:
    """What a hostile session did, on the host clock (hardware.now), for reports and further checks."""

    taken: Counter = field(default_factory=Counter)  # (channel, kind) of the commands taken
    refused: Counter = field(default_factory=Counter)  # (channel, kind) of the commands refused
    stream_end: float = math.nan
    at_rest: float = math.nan  # by when the setpoints had to come to rest after the stream
    silence_end: float = math.nan
    estop_at: float = math.nan
    estop_setpoint: np.ndarray | None = None  # the setpoint written last before the estop
    estop_speed: np.ndarray | None = None  # the setpoints' speed then, rad/s per joint
    stopped_at: float = math.nan  # by when the estop had to have stopped the arm
    enabled_at: float = math.nan
    refused_while_latched: int = 0
    written_times: list = field(default_factory=list)  # what the loop wrote, for messages
    written: list = field(default_factory=list)


def hostile_session(loop: ControlLoop, peer: PeerLog, seed: int) -> HostileRecord:
    """Play a seeded hostile client into `loop` on the wall clock, as the driver would, and check
    what reached the peer:

    1. STREAM_S of rounds of commands every COMMAND_PERIOD_S for every group and gripper, valid and
       not mixed (trajectories only in the first half, so the stream ends on watched streaming
       targets): every valid command is taken, every other refused;
    2. silence: within the watchdog's grace and the worst-case stopping time (plus a few cycles)
       the setpoints at the peer come to rest, and then stay the same for HOLD_S;
    3. a far target streamed for BURST_S, then loop.estop() while the arm moves: afterwards the
       setpoints stay within the stopping distance of where the estop found them, come to rest
       within the stopping time and stay there while the hostile client goes on, every one of its
       commands (valid ones too) refused with a CommandError naming the estop;
    4. loop.enable(): commands are taken again.

    The phases are counted in control cycles (a stalled host delays them, never shortens them)."""
    hardware, robot = loop.hardware, loop.robot
    rng = np.random.default_rng(seed)
    record = HostileRecord()
    lim = loop.limits
    # The worst case over the filter's limits and the datasheet's: the fastest speed, the weakest brake.
    vmax = np.maximum(lim.velocity, robot.limits.velocity)
    amax = np.minimum(lim.acceleration, robot.limits.acceleration)
    stop_cycles = math.ceil(float(np.max(vmax / amax)) / loop.dt) + SETTLE_CYCLES
    stopping_distance = vmax ** 2 / (2 * amax) + vmax * loop.dt  # braking, and the cycle under way

    write = hardware.write

    def recording_write(command, grippers, forces=None):
        record.written_times.append(hardware.now)
        record.written.append(np.array(command.position, float))
        write(command, grippers, forces)
    hardware.write = recording_write  # the instance's own attribute: gone with the instance
    next_round = [hardware.now]

    def send_round(trajectories: bool, latched: bool) -> None:
        if hardware.now < next_round[0]:
            return
        next_round[0] = hardware.now + COMMAND_PERIOD_S
        for command in hostile_round(robot, rng, trajectories, limits=loop.limits):
            error = send_to_controller(loop.controller, command, hardware.now)
            if latched:
                assert error is not None and "estop" in error, \
                    f"while the estop was latched, {command.channel} {command.kind} for {command.target}: " \
                    f"{'taken' if error is None else error}"
                record.refused_while_latched += 1
                continue
            (record.refused if error is not None else record.taken)[command.channel, command.kind] += 1
            # A valid command is taken, or refused because its target (or opening) would touch the cell or the robot.
            assert (error is None) == command.valid or \
                (command.valid and ("the target puts" in error or "the opening puts" in error)), \
                f"{command.channel} {command.kind} for {command.target} ({command.values}): " \
                f"{'taken' if error is None else error}"

    def run(cycles: int, each_cycle: Callable[[], None] = lambda: None) -> None:
        next_cycle = time.monotonic()
        for _ in range(cycles):
            loop.cycle()
            if peer.poll is not None:
                peer.poll()
            each_cycle()
            next_cycle += loop.dt
            delay = next_cycle - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing, as the driver paces its cycles
            elif delay < -10 * loop.dt:
                next_cycle = time.monotonic()

    # 1. The hostile stream. Its first half goes on until trajectories have been taken and refused
    # (a late host sends fewer rounds in the same cycles).
    stream_cycles = math.ceil(STREAM_S / loop.dt)
    run(stream_cycles // 2, lambda: send_round(trajectories=True, latched=False))
    for _ in range(10 * stream_cycles):
        if all(any(c == "trajectory" for c, _ in kinds) for kinds in (record.taken, record.refused)):
            break
        run(1, lambda: send_round(trajectories=True, latched=False))
    run(stream_cycles - stream_cycles // 2, lambda: send_round(trajectories=False, latched=False))
    record.stream_end = hardware.now
    for channel in ("positions", "trajectory"):
        assert any(c == channel for c, _ in record.taken) and any(c == channel for c, _ in record.refused), \
            f"the stream should have had {channel} commands taken and refused: {record.taken}, {record.refused}"
    stream_swing = _swing(peer, -math.inf, record.stream_end)
    assert stream_swing.max() > 0.05, f"the stream hardly moved the arm at the peer: swing {stream_swing}"

    # 2. Silence: at rest within the watchdog's grace and the stopping time, then still.
    run(math.ceil(lim.watchdog_s / loop.dt) + stop_cycles)
    record.at_rest = hardware.now
    run(math.ceil(HOLD_S / loop.dt))
    record.silence_end = hardware.now
    _check_still(peer, record.at_rest + peer.delivery_s, record.silence_end,
                 f"after the hostile stream ended (at {record.stream_end:.3f} s; at rest by "
                 f"{record.at_rest:.3f} s, watchdog {lim.watchdog_s} s + stopping time {np.max(vmax / amax):.3f} s)",
                 record)

    # 3. A far target, then the estop while the arm moves towards it; the client carries on.
    held = record.written[-1]
    by_group = _by_group(robot, clear_far_target(robot, loop.cell, held, lim, rng,
                                                 loop.controller.gripper_openings(), loop.dt))

    def stream_far() -> None:
        if hardware.now >= next_round[0]:
            next_round[0] = hardware.now + COMMAND_PERIOD_S
            for group, positions in by_group.items():
                loop.controller.command_positions(group, positions, hardware.now)
    run(math.ceil(BURST_S / loop.dt), stream_far)
    record.estop_setpoint = record.written[-1].copy()
    record.estop_speed = np.abs(record.written[-1] - record.written[-2]) / loop.dt
    assert np.max(record.estop_speed) > 0.1, f"the arm should be moving when the estop comes: {record.estop_speed}"
    record.estop_at = hardware.now
    loop.estop()
    estop_index = len(record.written)
    run(stop_cycles, lambda: send_round(trajectories=True, latched=True))
    record.stopped_at = hardware.now
    run(math.ceil(HOLD_S / loop.dt), lambda: send_round(trajectories=True, latched=True))
    latch_end = hardware.now
    assert record.refused_while_latched > 10, f"only {record.refused_while_latched} commands tried during the latch"

    travel = np.max(np.abs(np.array(record.written[estop_index:]) - record.estop_setpoint), axis=0)
    assert np.all(travel <= stopping_distance + 1e-9), \
        f"after the estop the loop's setpoints travelled {np.round(travel, 4)} rad, beyond the stopping distance " \
        f"{np.round(stopping_distance, 4)} (speeds at the estop {np.round(record.estop_speed, 3)} rad/s)"
    slack = stopping_distance + vmax * peer.carry_s + peer.resolution
    for j, (times, values) in enumerate(peer.sent()):
        after = values[(times >= record.estop_at + peer.delivery_s) & (times <= latch_end)]
        assert after.size >= MIN_SETPOINTS, f"joint {robot.joint_names[j]}: only {after.size} setpoints reached " \
                                            "the peer after the estop"
        moved = np.max(np.abs(after - record.estop_setpoint[j]))
        assert moved <= slack[j], f"joint {robot.joint_names[j]}: after the estop the peer got setpoints " \
                                  f"{moved:.4f} rad from the setpoint the estop found, beyond the stopping " \
                                  f"distance {slack[j]:.4f} rad"
    _check_still(peer, record.stopped_at + peer.delivery_s, latch_end,
                 f"after the estop (at {record.estop_at:.3f} s; stopped by {record.stopped_at:.3f} s)", record)

    # 4. Enable: commands are taken again.
    loop.enable()
    record.enabled_at = hardware.now
    run(math.ceil(0.1 / loop.dt))
    for group, positions in _by_group(robot, record.written[-1]).items():
        loop.controller.command_positions(group, positions, hardware.now)
    run(math.ceil(0.1 / loop.dt))
    return record


def clear_far_target(robot: RobotSpec, scene, here, limits, rng, openings=None, dt: float | None = None,
                     seconds: float = 1.0) -> np.ndarray:
    """A target 0.5 rad or more from `here` (at rest) on some joint that the command path takes and
    drives the arm toward without a stop short for `seconds` (longer than an estop takes to come):
    rehearsed on a JointController of `limits` (velocity, acceleration, lower, upper) with the
    collision check of `scene`, grippers at `openings`, at cycles of `dt`. The rehearsal keeps 1 cm
    more margin than the driver, so that the driver's own start (a setpoint a servo error away from
    `here`) does not meet the cell either."""
    from r2s2r.contract.types import CommandError
    from r2s2r.hardware.controller import JointController
    from r2s2r.sim.collision import DEFAULT_MARGIN_M, guard_for

    guard = guard_for(scene, DEFAULT_MARGIN_M + 0.01)
    dt = dt or 1.0 / robot.control_rate_hz
    here = np.asarray(here, dtype=float)
    for _ in range(1000):
        step = rng.uniform(-0.3, 0.3, here.size)
        j = rng.integers(here.size)  # one joint goes far, to the side with room
        room = np.array([here[j] - limits.lower[j], limits.upper[j] - here[j]])
        side = int(rng.integers(2)) if room.min() >= 0.5 else int(np.argmax(room))
        if room[side] < 0.5:
            continue
        step[j] = (1.0 if side else -1.0) * rng.uniform(0.5, min(2.5, room[side]))
        far = np.clip(here + step, limits.lower, limits.upper)
        if np.max(np.abs(far - here) / limits.velocity) < 0.6:  # arrived before an estop meets it
            continue
        controller = JointController(robot, here, velocity=limits.velocity, acceleration=limits.acceleration,
                                     lower=limits.lower, upper=limits.upper, guard=guard)
        if openings is not None:
            controller.hold_grippers(openings)
        try:
            for g in robot.groups:
                controller.command_positions(g.name, far[[robot.joint_names.index(j) for j in g.joints]])
        except CommandError:
            continue
        for i in range(int(round(seconds / dt))):
            controller.update(i * dt, dt)
            if controller.stats.stopped_short:
                break
        else:
            return far
    raise AssertionError(f"no target 0.5 rad or more from {here} that the arm reaches clear of the cell")


def _swing(peer: PeerLog, start: float, end: float) -> np.ndarray:
    """Per joint, how far apart the setpoints the peer received between `start` and `end` lie (0 for none)."""
    swings = []
    for times, values in peer.sent():
        window = values[(times >= start) & (times <= end)]
        swings.append(float(np.ptp(window)) if window.size else 0.0)
    return np.array(swings)


def _check_still(peer: PeerLog, start: float, end: float, when: str, record: HostileRecord) -> None:
    """Every joint's setpoints at the peer between `start` and `end` are one setpoint, to the protocol's resolution."""
    counts = [int(np.count_nonzero((times >= start) & (times <= end))) for times, _ in peer.sent()]
    assert min(counts) >= MIN_SETPOINTS, f"{when}: only {min(counts)} setpoints reached the peer from {start:.3f} " \
                                         f"to {end:.3f} s: nothing to check"
    swing = _swing(peer, start, end)
    if np.all(swing < peer.resolution):
        return
    times = np.array(record.written_times)
    late = np.array(record.written)[(times >= start) & (times <= end)]
    raise AssertionError(
        f"{when}: the setpoints that reached the peer from {start:.3f} to {end:.3f} s still swing by "
        f"{np.round(swing, 4)} rad (resolution {peer.resolution:.2g}); the loop wrote setpoints that swing by "
        f"{np.round(np.ptp(late, axis=0), 4) if len(late) else '(none)'} rad then")
