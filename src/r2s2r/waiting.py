"""Waiting for what another thread, process or robot changes: used by every layer (the ROS
client, the tests), like config and paths."""

from __future__ import annotations

import time
from typing import Callable


def wait_for(predicate: Callable[[], bool], timeout: float, poll: float = 0.01) -> bool:
    """Poll `predicate` every `poll` seconds until it holds or `timeout` seconds pass; returns its
    last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return predicate()
