"""A thread that runs a backend's blocking SDK calls (gripper moves, command-stream sends) so the
control loop never waits on them. Only the newest request matters: a request submitted while an
older one is still pending replaces it. Between requests an optional `idle` call runs
periodically (polling a gripper's encoders, say). The module name starts with "_" so that
hardware.backends does not take it for a backend.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

_NOTHING = object()


class LatestWorker:
    def __init__(self, name: str, action: Callable[[Any], None], idle: Callable[[], None] | None = None,
                 idle_period_s: float = 0.02):
        self.name = name
        self._action = action
        self._idle = idle
        self._idle_period_s = idle_period_s
        self._pending: Any = _NOTHING
        self._busy = False
        self._error: BaseException | None = None
        self._closed = False
        self._wake = threading.Condition()
        self.calls = 0  # requests run (not idle calls), for diagnostics
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: Any) -> None:
        with self._wake:
            if self._closed:
                raise RuntimeError(f"worker {self.name} is closed")
            self._pending = request
            self._wake.notify()

    def take_error(self) -> BaseException | None:
        """The exception the last failed call raised (once), or None."""
        with self._wake:
            error, self._error = self._error, None
            return error

    def flush(self, timeout_s: float) -> bool:
        """Wait until every submitted request has run; False if that took longer than timeout_s."""
        with self._wake:
            return self._wake.wait_for(lambda: self._pending is _NOTHING and not self._busy, timeout_s)

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop after the call in progress (pending requests are dropped). Safe to call twice."""
        with self._wake:
            self._closed = True
            self._pending = _NOTHING
            self._wake.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        next_idle = time.monotonic()
        while True:
            with self._wake:
                while self._pending is _NOTHING and not self._closed:
                    if self._idle is None:
                        self._wake.wait()
                        continue
                    remaining = next_idle - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(remaining)
                if self._closed:
                    return
                request, self._pending = self._pending, _NOTHING
                self._busy = True
            try:
                if request is not _NOTHING:
                    self._action(request)
                    self.calls += 1
                # Idle calls keep their period even while requests keep coming.
                if self._idle is not None and time.monotonic() >= next_idle:
                    next_idle = time.monotonic() + self._idle_period_s
                    self._idle()
            except Exception as exc:  # reported to the control loop through take_error()
                with self._wake:
                    self._error = exc
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()
