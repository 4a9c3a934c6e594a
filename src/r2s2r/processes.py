"""What every long-running r2s2r process does at start (leave with its parent, say where it
is stuck when asked) and how a parent signals the processes it started. No ROS here: the
stack runner and the nodes both use it."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import traceback

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


def _print_stacks() -> None:
    names = {t.ident: t.name for t in threading.enumerate()}
    lines = []
    for ident, top in sys._current_frames().items():
        lines.append(f"Thread 0x{ident:016x} ({names.get(ident, '?')}) (most recent call first):")
        lines += [f'  File "{f.filename}", line {f.lineno} in {f.name}' for f in reversed(traceback.extract_stack(top))]
    print("\n".join(lines), file=sys.stderr, flush=True)


def dump_stacks_on(sig: int = getattr(signal, "SIGUSR1", 0)) -> None:
    """`kill -USR1 <pid>` prints every thread's Python stack to stderr: a node or a runner
    that will not stop says where it is stuck. Call it before any thread starts: the signal is
    blocked in every thread and taken by one of its own, which prints under the GIL, whatever
    the main thread is blocked in. (faulthandler's dump reads the other threads' frames while
    they run: it crashed a driver whose control thread was busy, SIGSEGV mid-dump.)"""
    if not sig:
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {sig})  # inherited by every thread started after this

    def watch() -> None:
        while True:
            signal.sigwait({sig})
            _print_stacks()
    threading.Thread(target=watch, name="stack-dump", daemon=True).start()


__all__ = ["exit_with_parent", "signal_group", "dump_stacks_on"]
