"""The log each stand-in's world keeps of the SDK calls a backend makes: name, arguments, calling
thread and time, for tests to check what was sent, how often and from which thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass
class Call:
    name: str
    args: tuple
    thread: str
    time: float


class CallLog:
    """The calls made so far. `lock` is reentrant, and the world guards its simulated robots
    with it too: a call is logged and acted on as one step."""

    def __init__(self):
        self.lock = threading.RLock()
        self.calls: list[Call] = []

    def log(self, name: str, *args) -> None:
        with self.lock:
            self.calls.append(Call(name, args, threading.current_thread().name, time.monotonic()))

    def calls_of(self, name: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.name == name]
