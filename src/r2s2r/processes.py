"""What every long-running r2s2r process does at start (leave with its parent, say where it
is stuck when asked) and how a parent signals the processes it started. No ROS here: the
stack runner and the nodes both use it."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys

# prctl(2) option: the signal this process gets when the thread that started it exits.
_PR_SET_PDEATHSIG = 1


def exit_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel for `sig` when our parent (the stack runner, ros2 launch) dies, so a
    runner killed with SIGKILL leaves no node behind holding the robot or the ROS domain.
    SIGTERM takes a node's clean path: it stops commanding and closes its hardware. Linux
    only; returns whether it is armed."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent died before the request took hold
        os.kill(os.getpid(), sig)
    return True


def signal_group(pid: int, sig: int) -> None:
    """`sig` to the process group `pid` leads (a process started in a session of its own,
    with its children); one already gone is no error."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def dump_stacks_on(sig: int = getattr(signal, "SIGUSR1", 0)) -> None:
    """`kill -USR1 <pid>` prints every thread's Python stack to stderr: a node or a runner
    that will not stop says where it is stuck."""
    if sig:
        faulthandler.register(sig, all_threads=True)


__all__ = ["exit_with_parent", "signal_group", "dump_stacks_on"]
