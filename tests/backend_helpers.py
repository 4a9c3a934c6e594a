"""Shared by the hardware backend tests and the tests of the emulators they run against: an
active backend in a ControlLoop, targets streamed through it on the wall clock as the driver
streams them, the arrival check those streams stop on, the checks that a backend imports without
its SDK."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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

    hw.connect()
    hw.activate()
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
        f"hw.connect(); hw.activate(); print(sys.modules[{sdk!r}].__name__, hw.read().names[0]); hw.disconnect()"])
    path = [REPO / "tests" / "standins" / "shim", REPO, REPO / "src"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _import_without(module: str, sdk_modules) -> list[str]:
    return [f"import sys, {module} as backend",
            f"assert all(m not in sys.modules for m in {tuple(sdk_modules)!r}), 'SDK imported eagerly'"]
