"""What every long-running r2s2r process does at start (leave with its parent, say where it
is stuck when asked; the recorder and the soak also give freed memory back to the system), how a
parent signals the processes it started, and how a command that writes a folder keeps a second
one out. No ROS here: the stack runner and the nodes both use it."""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path

# prctl(2) option: the signal this process gets when the thread that started it exits.
_PR_SET_PDEATHSIG = 1
# mallopt(3) parameter (glibc's malloc.h): the size from which malloc maps a block of its own.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value


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


def return_large_blocks_to_the_os(threshold: int = MMAP_THRESHOLD) -> bool:
    """Have malloc map every block of `threshold` bytes or more on its own and unmap it when it
    is freed, for the whole life of this process (glibc; returns whether it took hold).

    glibc starts out doing that from 128 KiB, but raises the threshold to the size of each such
    block freed (up to 32 MiB), so after the first one, blocks of that size come from the
    arenas, which keep their pages. A process that allocates and frees megabytes over and over
    from several threads, as the recorder does for every MCAP chunk (the 1 MiB chunk buffer, its
    copy, zstd's workspace, the compressed chunk, each on whichever executor thread wrote the
    message that filled it), then grows its arenas by fragmentation: in the endurance bench's
    stack (bench/stack_endurance.py) the recorder's arenas grew by 3.1 MiB in 8 minutes, and its
    resident memory with them, while the memory malloc had in use stayed at 14.5 MiB. Setting
    the threshold explicitly also turns glibc's raising of it off; a large block can still be
    carved from free space an arena already has, but no arena grows for one. What it costs is
    a mmap and a munmap per large block, a few per chunk. MALLOC_MMAP_THRESHOLD_ in the
    environment, an operator's own choice, is left as it is."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:  # a C library without mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1


def trim_heap() -> bool:
    """Give the heap's free pages back to the system (glibc's malloc_trim; returns whether any
    were). A process that builds and tears down a large object over and over (the soak, a twin
    driver per episode) otherwise keeps the freed pages scattered through its arenas, and its
    resident memory reads as growth that is no object of its own."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except AttributeError:  # not glibc
        return False
    malloc_trim.argtypes, malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return malloc_trim(0) == 1


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


@contextmanager
def sole_writer(folder: str | Path, what: str, error: type[Exception] = RuntimeError):
    """Hold an exclusive lock on `folder` (made if missing) while one command writes into it. A
    second writer is refused at once with `error`, naming the folder, instead of two of them
    interleaving their files; the kernel drops the lock when the holder exits, even on kill -9.
    A folder made here and left empty by a failure is removed again."""
    folder = Path(folder)
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise error(f"{folder}: another {what} is writing here now; expected one at a time (let it "
                        f"finish, or choose another folder)") from None
        yield folder
    except BaseException:
        if made and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        raise
    finally:
        os.close(descriptor)


__all__ = ["exit_with_parent", "signal_group", "dump_stacks_on", "return_large_blocks_to_the_os", "sole_writer"]
