"""How the long, resumable commands end (r2s2r train, collect, improve, skills refine,
fidelity): one message and exit code for an error the user can fix (2) and for Ctrl-C (130,
with what is kept and how to resume), so every such command answers alike."""

from __future__ import annotations

import sys
from typing import Callable, TypeVar

T = TypeVar("T")
ERROR_EXIT, STOPPED_EXIT = 2, 130


def run_resumable(command: str, work: Callable[[], T], errors: tuple[type[Exception], ...],
                  kept: Callable[[], str]) -> tuple[T | None, int]:
    """`work()` for `r2s2r COMMAND`: (its result, 0); one of `errors` is printed as the command's
    error, (None, 2); Ctrl-C prints `kept()` (what is kept and how to resume), (None, 130)."""
    try:
        return work(), 0
    except errors as exc:
        print(f"r2s2r {command}: error: {exc}", file=sys.stderr)
        return None, ERROR_EXIT
    except KeyboardInterrupt:
        print(f"\nr2s2r {command}: stopped; {kept()}", file=sys.stderr)
        return None, STOPPED_EXIT
