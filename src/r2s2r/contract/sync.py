"""Approximate-time synchronisation: join streams (joint states, several cameras) whose stamps
differ into one observation, the way message_filters' ApproximateTimeSynchronizer does.

Each key keeps a bounded queue of (stamp, value). When a message arrives, the synchroniser looks
for one message per key, the new one included, whose stamps all lie within `tolerance_s` of
each other, picks the set with the smallest skew, and emits it at once. Messages older than
the emitted set can never join a later one; they are discarded and counted in `dropped`, as
are messages pushed out of a full queue and messages older than the last set of their key.
Pure Python and numpy: no ROS graph needed.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class SyncedObservation:
    stamp: float  # the newest capture stamp in the set
    items: dict[str, tuple[float, object]]  # key -> (capture stamp, value)
    skew: float  # newest minus oldest stamp in the set, seconds


class ApproximateTimeSynchronizer:
    def __init__(self, keys: Sequence[str], tolerance_s: float, queue_size: int = 30):
        keys = tuple(keys)
        if not keys or len(set(keys)) != len(keys):
            raise ValueError(f"synchroniser keys {list(keys)}; expected at least one, each once")
        if not (isinstance(tolerance_s, (int, float)) and math.isfinite(tolerance_s) and tolerance_s >= 0):
            raise ValueError(f"tolerance_s {tolerance_s!r}; expected a finite number of seconds >= 0")
        if not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"queue_size {queue_size!r}; expected an integer >= 1")
        self.keys = keys
        self.tolerance_s = float(tolerance_s)
        self.queue_size = queue_size
        self.dropped = 0
        self._stamps: dict[str, list[float]] = {k: [] for k in keys}  # sorted
        self._values: dict[str, list[object]] = {k: [] for k in keys}  # in step with _stamps
        self._last_used: dict[str, float] = {k: -math.inf for k in keys}
        self._latest: SyncedObservation | None = None

    def clear(self) -> None:
        """Forget every queued message and set: a new episode, whose clock may start anew."""
        for k in self.keys:
            self._stamps[k].clear()
            self._values[k].clear()
            self._last_used[k] = -math.inf
        self._latest = None

    def add(self, key: str, stamp: float, value) -> SyncedObservation | None:
        """Queue one message; returns the set it completes, if it completes one."""
        if key not in self._stamps:
            raise KeyError(f"synchroniser key {key!r}; expected one of {', '.join(self.keys)}")
        stamp = float(stamp)
        if not math.isfinite(stamp):
            raise ValueError(f"stamp {stamp!r} for {key!r}; expected a finite time in seconds")
        if stamp <= self._last_used[key]:  # older than a set already emitted: it would go back in time
            self.dropped += 1
            return None
        stamps, values = self._stamps[key], self._values[key]
        index = bisect.bisect_right(stamps, stamp)
        stamps.insert(index, stamp)
        values.insert(index, value)
        if len(stamps) > self.queue_size:
            del stamps[0], values[0]
            self.dropped += 1
            if index == 0:
                return None  # the new message itself was the oldest
        chosen = self._best_set(key, stamp)
        if chosen is None:
            return None
        items = {}
        for k, i in chosen.items():
            items[k] = (self._stamps[k][i], self._values[k][i])
            self.dropped += i  # the older ones left behind in this queue
            del self._stamps[k][: i + 1], self._values[k][: i + 1]
            self._last_used[k] = items[k][0]
        used = [s for s, _ in items.values()]
        self._latest = SyncedObservation(stamp=max(used), items=items, skew=max(used) - min(used))
        return self._latest

    def _best_set(self, key: str, stamp: float) -> dict[str, int] | None:
        """Queue indices of the smallest-skew set that holds (key, stamp), or None."""
        others = [k for k in self.keys if k != key]
        if any(not self._stamps[k] for k in others):
            return None
        tol = self.tolerance_s
        # The set's oldest stamp is the new one or one of the others' within tolerance below it;
        # for each candidate oldest stamp, every other key takes its first message at or after it.
        candidates = {stamp}
        for k in others:
            s = self._stamps[k]
            candidates.update(s[bisect.bisect_left(s, stamp - tol): bisect.bisect_right(s, stamp)])
        best, best_skew = None, math.inf
        for low in sorted(candidates, reverse=True):  # newer sets first: they win ties
            picks = {key: self._stamps[key].index(stamp)}
            newest = stamp
            for k in others:
                s = self._stamps[k]
                i = bisect.bisect_left(s, low)
                if i == len(s):
                    break
                picks[k] = i
                newest = max(newest, s[i])
            else:
                skew = newest - low
                if skew <= tol and skew < best_skew:
                    best, best_skew = picks, skew
        return best

    def latest(self) -> SyncedObservation | None:
        """The most recent set emitted."""
        return self._latest


__all__ = ["ApproximateTimeSynchronizer", "SyncedObservation"]
