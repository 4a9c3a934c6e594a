"""Helpers for tests that run real processes on the session's ROS domain."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from r2s2r.processes import signal_group

REPO = Path(__file__).resolve().parents[1]


def own_context():
    """An initialised rclpy Context: a DDS participant of the caller's own, whose graph holds
    only what is announced while it lives (a participant the whole session shared kept entries
    of nodes stopped long before). Shut it down when done."""
    import rclpy
    from rclpy.context import Context
    context = Context()
    rclpy.init(context=context)
    return context


class StackProcess:
    """`r2s2r up` in a subprocess, its output kept for assertions."""

    def __init__(self, stack: str, params=(), env: dict | None = None, pythonpath=(), command=("up",)):
        args = [sys.executable, "-u", "-m", "r2s2r.cli", *command, str(stack)]
        for p in params:
            args += ["-p", p]
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), str(REPO / "src"), str(REPO),
                                             env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.lines)):
                return True
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return any(text in line for line in list(self.lines))

    def node_pids(self) -> dict[str, int]:
        """The runner's node processes, by node name, as it announced them."""
        return {m[1]: int(m[2]) for line in list(self.lines)
                if (m := re.match(r"\[r2s2r up\] started (\S+) \(\S+\), pid (\d+)", line))}

    def stop(self, sig=signal.SIGINT, timeout: float = 10.0) -> float:
        """Signal the runner; returns how long it took to exit. A stack that does not stop
        has every process print its threads' stacks (SIGUSR1) into the error, and is killed
        whole, nodes included, so no node outlives its test and talks into the next one."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pids = [self.proc.pid, *self.node_pids().values()]
                for pid in pids:
                    signal_group(pid, signal.SIGUSR1)
                time.sleep(1.0)
                for pid in pids:
                    signal_group(pid, signal.SIGKILL)
                self.proc.wait()
                self._reader.join(timeout=2)
                raise AssertionError(f"stack did not stop within {timeout} s:\n{self.output}") from None
        self._reader.join(timeout=2)
        return time.monotonic() - start

