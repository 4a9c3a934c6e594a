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


class XArmEmulatorProcess:
    """tests/emulators/xarm_emulator.py in a process of its own: the controller then never waits
    on the test process's own threads (its DDS client, other peers)."""

    def __init__(self, host: str):
        self.host = host
        self.process = None

    def start(self) -> "XArmEmulatorProcess":
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # Ahead of the test's own processes where we may (root, as in CI): a real controller is a
        # machine of its own, its report stream does not wait for our CPU.
        self.process = subprocess.Popen([sys.executable, "-u", "-m", "tests.emulators.xarm_emulator",
                                         "--host", self.host, "--log-level", "WARNING"], cwd=repo,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        preexec_fn=_raise_priority)
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            if "emulator running" in line:
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return self
        self.process.wait(5)
        pytest.fail(f"the xArm emulator did not start on {self.host}:\n{''.join(lines)}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
