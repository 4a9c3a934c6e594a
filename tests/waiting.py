"""Waiting in tests for what other threads, processes or emulators change."""

from __future__ import annotations

import time
from typing import Callable


def wait_for(predicate: Callable[[], bool], timeout: float, poll: float = 0.02) -> bool:
    """Poll `predicate` until it holds or `timeout` seconds pass; returns its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return predicate()
