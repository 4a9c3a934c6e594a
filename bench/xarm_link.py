"""The xArm backend against the controller emulator: how long read() and write() take in a
250 Hz control loop, and how long a lost link takes to show as LinkLost, for a closed
controller (emulator stop) and a hung one (emulator pause). p50 / p99 / max.

Everything runs in this one process (emulator, SDK threads, control loop), so the figures are
an upper bound for what the SDK and the backend add; a real controller's network is not in them.
Binding the controller's port 502 needs root.

Usage: python bench/xarm_link.py [--seconds S] [--losses N] [--host 127.0.0.41]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.emulators


def percentiles(label: str, seconds) -> None:
    ms = 1000.0 * np.asarray(seconds)
    print(f"{label:34s} p50 {np.percentile(ms, 50):7.3f} ms   p99 {np.percentile(ms, 99):7.3f} ms   "
          f"max {ms.max():7.3f} ms   (n={len(ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="streaming time for the cycle figures")
    parser.add_argument("--losses", type=int, default=10, help="link losses of each kind")
    parser.add_argument("--host", default="127.0.0.41", help="loopback address for the emulator")
    args = parser.parse_args()
    from r2s2r.contract.types import JointCommand
    from r2s2r.hardware.base import LinkLost
    from r2s2r.hardware.loop import ControlLoop
    from r2s2r.hardware.xarm import XArmHardware
    from r2s2r.robots import get_robot
    from tests.emulators.xarm_emulator import XArmEmulator

    robot = get_robot("xarm7")
    home = robot.home_positions
    emulator = XArmEmulator(args.host, initial_joints=home.tolist()).start()
    hw = XArmHardware(robot, {"ip": args.host})
    reads, writes, lost = [], [], {"stop": [], "pause": []}
    try:
        hw.connect()
        hw.activate()
        loop = ControlLoop(hw)
        amplitude = np.zeros(len(home))
        amplitude[0] = 0.5

        def cycle(now):
            loop.controller.command_positions("arm", home + amplitude * np.sin(now), hw.now)
            start = time.perf_counter()
            hw.read()
            reads.append(time.perf_counter() - start)
            setpoints = loop.safety(loop.controller.update(hw.now, loop.dt))
            start = time.perf_counter()
            hw.write(JointCommand(robot.joint_names, setpoints), loop.controller.gripper_openings())
            writes.append(time.perf_counter() - start)

        next_cycle = end = time.monotonic()
        end += args.seconds
        while time.monotonic() < end:
            cycle(time.monotonic())
            next_cycle += loop.dt
            time.sleep(max(0.0, next_cycle - time.monotonic()))

        for kind in ("stop", "pause"):
            for _ in range(args.losses):
                for _ in range(50):  # 0.2 s of streaming first
                    loop.controller.command_positions("arm", home, hw.now)
                    loop.cycle()
                    time.sleep(loop.dt)
                getattr(emulator, kind)()
                began = time.monotonic()
                try:
                    while True:
                        loop.cycle()
                        time.sleep(loop.dt)
                except LinkLost:
                    lost[kind].append(time.monotonic() - began)
                hw.disconnect()
                if kind == "stop":
                    emulator.start()
                else:
                    emulator.resume()
                hw.connect()
                hw.activate()
                loop.hold_here()
    finally:
        hw.disconnect()
        emulator.stop()
    percentiles("read() in the control loop", reads)
    percentiles("write() in the control loop", writes)
    percentiles("LinkLost after emulator.stop()", lost["stop"])
    percentiles("LinkLost after emulator.pause()", lost["pause"])


if __name__ == "__main__":
    main()
