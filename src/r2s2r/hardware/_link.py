"""How long a robot has been silent, for backends that learn of a lost link from missing state.

A host that stops running the driver for a while (a loaded machine, a long GC pause) stops the
SDK's state thread as well, and silence measured across that gap proves nothing about the link.
So silence counts from the robot's last word, or, after a stall of our own (no look for more
than half the timeout), from when we looked again: the robot gets one full timeout after each
stall, and only one until it is heard again, so a slow caller cannot postpone the verdict.
"""

from __future__ import annotations


class SilenceClock:
    def __init__(self, timeout_s: float, now: float):
        self.timeout_s = timeout_s
        self.reset(now)

    def reset(self, now: float) -> None:
        self._heard = self._since = self._looked = now
        self._granted = False

    def heard(self, at: float) -> None:
        if at > self._heard:
            self._heard, self._granted = at, False

    def silence(self, now: float) -> float:
        """Seconds of silence that count, as of `now` (call it at every look)."""
        if now - self._looked > self.timeout_s / 2 and not self._granted:
            self._since, self._granted = now, True
        self._looked = now
        return now - max(self._heard, self._since)
