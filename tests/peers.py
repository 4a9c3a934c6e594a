"""Protocol peers that run as processes of their own, shared by the backend and conformance tests."""

import os
import subprocess
import sys
import threading

import pytest


def _raise_priority():
    """Run franky-sim ahead of the test's own processes where we may (as root, in CI)."""
    try:
        os.nice(-10)
    except OSError:
        pass


class FrankySim:
    """franky-sim as a subprocess on one loopback address."""

    def __init__(self, host: str):
        self.host = host
        self.process = None

    def start(self) -> None:
        # `--simulator mujoco`: franky-sim 1.0.4's default ("auto") fails when genesis is absent.
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from franky_sim import run_server_main; run_server_main()",
             "--simulator", "mujoco", "--hostname", self.host],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_raise_priority)
        lines = []
        for line in self.process.stdout:  # the robot and gripper ports are bound before this line
            lines.append(line)
            if "Connect to the server" in line:
                # Keep reading what it prints, so a full pipe never stalls its 1 kHz loop.
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return
        self.process.wait(5)
        pytest.fail(f"franky-sim did not start on {self.host}:\n{''.join(lines)}")

    def signal(self, sig) -> None:
        self.process.send_signal(sig)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait(5)
            self.process.stdout.close()


class _EmulatorProcess:
    """One of tests/emulators as a process of its own, ahead of the test's own processes where we
    may (root, as in CI): a real controller or servo is a machine of its own and does not wait
    for the test process's threads (its DDS client, other peers) or our CPU."""

    def _spawn(self, args: list, ready: str, what: str) -> None:
        """Start `python -m tests.emulators.<args>` and wait for its line containing `ready`."""
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.process = subprocess.Popen([sys.executable, "-u", "-m", *args], cwd=repo, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, preexec_fn=_raise_priority)
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            if ready in line:
                # Keep reading what it prints, so a full pipe never stalls it.
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return
        self.process.wait(5)
        pytest.fail(f"{what} did not start:\n{''.join(lines)}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


class XArmEmulatorProcess(_EmulatorProcess):
    """tests/emulators/xarm_emulator.py on one loopback address."""

    def __init__(self, host: str):
        self.host = host
        self.process = None

    def start(self) -> "XArmEmulatorProcess":
        self._spawn(["tests.emulators.xarm_emulator", "--host", self.host, "--log-level", "WARNING"],
                    "emulator running", f"the xArm emulator on {self.host}")
        return self


class DynamixelBusProcess(_EmulatorProcess):
    """One emulated Dynamixel bus (tests/emulators/dynamixel_emulator.py, a ViperX follower) behind
    a pty at `link_path`: its servos answer within the SDK's reply window even while the test
    process's DDS client holds the GIL."""

    def __init__(self, link_path):
        self.link_path = str(link_path)
        self.process = None

    def start(self) -> "DynamixelBusProcess":
        # The emulator names its link once the pty and the link exist.
        self._spawn(["tests.emulators.dynamixel_emulator", "--link", self.link_path], self.link_path,
                    f"the Dynamixel emulator at {self.link_path}")
        return self
