"""The policy runtime: from observations to a joint command at every control tick.

Every tick the caller hands `step(now, observation)` the robot-clock time and the newest
synchronised observation; it returns the command for `now`. Inside:

- Inference runs on a worker thread (`asynchronous`), so the next chunk is computed while
  the current one executes. A new inference starts `replan_steps` policy steps after the
  previous one, from an observation no older than `max_observation_age_s`.
- Each chunk is a function of time: target i of a chunk stamped t0 is for t0 + i dt, linear
  in between, the last held for one more step. A chunk is used from arrival until
  `max_action_age_s` after its observation (default: its length in time), never later.
- Chunks that overlap `now` are combined by ACT's temporal ensembling: weights
  exp(-m i), i = 0 for the oldest chunk (m = `ensemble_coefficient`); without ensembling the
  newest chunk wins.
- An inference running longer than `deadline_s` is a miss: `continue` keeps executing what
  is live, `hold` drops it and holds the last command until a fresh chunk arrives. A result
  that comes back after its deadline is discarded. A policy that raises holds the same way.
- With nothing to execute, the command holds the last target (or, before the first one, the
  observed position).

`asynchronous: false` runs inference inside `step` (the in-process evaluation engine, whose
simulated clock waits for it); deadlines do not apply there.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from r2s2r.config import Section
from r2s2r.policy.types import ActionChunk, DeadlineMiss, Observation, Policy, PolicyError

ON_MISS = ("continue", "hold")
TICK_EPS = 1e-6  # s: ticks land on k * dt only up to rounding; a re-plan due "now" must not slip a tick


@dataclass(frozen=True)
class RuntimeConfig:
    max_observation_age_s: float = 0.2
    deadline_s: float = 1.0
    on_deadline_miss: str = "continue"
    ensemble_coefficient: float | None = None  # ACT uses 0.01
    replan_steps: int | None = None  # default: 1 when ensembling, else half a chunk
    max_action_age_s: float | None = None  # default: the chunk's length in time
    asynchronous: bool = True

    KEYS = ("max_observation_age_s", "deadline_s", "on_deadline_miss", "ensemble_coefficient", "replan_steps",
            "max_action_age_s", "asynchronous")

    @classmethod
    def from_section(cls, sec: Section) -> "RuntimeConfig":
        sec.reject_unknown(cls.KEYS)
        optional = {}
        if sec.raw("ensemble_coefficient", None) is not None:
            # exp(-m i) weighs the oldest chunk most; a negative m overflows to NaN targets
            optional["ensemble_coefficient"] = sec.number("ensemble_coefficient", minimum=0.0)
        if sec.raw("replan_steps", None) is not None:
            optional["replan_steps"] = sec.integer("replan_steps", minimum=1)
        if sec.raw("max_action_age_s", None) is not None:
            optional["max_action_age_s"] = sec.number("max_action_age_s", positive=True)
        return cls(max_observation_age_s=sec.number("max_observation_age_s", cls.max_observation_age_s, positive=True),
                   deadline_s=sec.number("deadline_s", cls.deadline_s, positive=True),
                   on_deadline_miss=sec.string("on_deadline_miss", cls.on_deadline_miss, choices=ON_MISS),
                   asynchronous=sec.boolean("asynchronous", cls.asynchronous), **optional)

    @classmethod
    def from_dict(cls, data: dict | None, source: str = "runtime") -> "RuntimeConfig":
        return cls.from_section(Section(data or {}, source))


@dataclass(frozen=True)
class Command:
    """Targets for `stamp`; `reason` says why the runtime holds ('' while following the policy)."""

    stamp: float
    joints: dict[str, np.ndarray]
    grippers: dict[str, float]
    reason: str = ""

    @property
    def holding(self) -> bool:
        return bool(self.reason)


@dataclass
class RuntimeStats:
    inferences: int = 0  # chunks accepted
    deadline_misses: int = 0
    discarded: int = 0  # results that came back after their deadline
    stale_observations: int = 0  # observations too old to infer from
    errors: int = 0
    last_error: str = ""
    last_miss: str = ""  # what the last missed deadline said, where the policy said (DeadlineMiss)
    observation_age_s: float = math.nan
    latencies: deque = field(default_factory=lambda: deque(maxlen=500))  # wall seconds per inference

    def latency_percentiles(self) -> tuple[float, float]:
        if not self.latencies:
            return math.nan, math.nan
        p50, p99 = np.percentile(np.asarray(self.latencies), [50, 99])
        return float(p50), float(p99)


@dataclass
class _Live:
    stamp: float
    actions: np.ndarray  # (T, A)


@dataclass
class _Inflight:
    future: Future
    submitted: float  # robot clock
    missed: bool = False


def _timed_act(act: Callable[[Observation], ActionChunk], observation: Observation) -> tuple[ActionChunk, float]:
    start = time.perf_counter()
    chunk = act(observation)
    return chunk, time.perf_counter() - start


class PolicyRuntime:
    """`act`: what infers a chunk from an observation, by default `policy.act` (the in-process
    runner's batches hand each trial's runtime the chunk their one call made for it)."""

    def __init__(self, policy: Policy, config: RuntimeConfig | None = None,
                 act: Callable[[Observation], ActionChunk] | None = None):
        self.policy = policy
        self._act = act or policy.act
        self.config = config or RuntimeConfig()
        self.metadata = policy.metadata
        self.space = policy.metadata.action
        self.dt = policy.metadata.dt
        c = self.config
        self.replan_steps = c.replan_steps or (1 if c.ensemble_coefficient is not None
                                               else max(1, policy.metadata.chunk_length // 2))
        self.stats = RuntimeStats()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="policy-inference") if c.asynchronous else None
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self._chunks: list[_Live] = []  # oldest first
        self._inflight: _Inflight | None = None  # dropped by a reset: its result is never looked at
        self._next_request = -math.inf
        self._last: np.ndarray | None = None
        self._hold_reason = ""  # set by a miss (on_deadline_miss: hold) or an error, cleared by a fresh chunk
        self._fault = ""  # the error the runtime holds for, if it holds for one
        self._last_stale_stamp = math.nan

    @property
    def fault(self) -> str:
        """The policy's error while the runtime holds because of it, else ''."""
        return self._fault

    def reset(self) -> None:
        """Start a new episode: forget chunks and targets; an inference in flight is ignored."""
        with self._lock:
            self._clear()
            self.policy.reset()

    def close(self) -> None:
        close = getattr(self.policy, "close", None)
        if close is not None:  # first: a remote call in flight ends when its connection closes
            close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no inference runs (tests, shutdown)."""
        inflight = self._inflight
        if inflight is None:
            return True
        try:
            inflight.future.exception(timeout=timeout)
            return True
        except TimeoutError:
            return False

    # -- the tick -------------------------------------------------------------------------------------
    def step(self, now: float, observation: Observation | None) -> Command | None:
        with self._lock:
            self._collect(now)
            if observation is not None:
                self.stats.observation_age_s = now - observation.stamp
                self._maybe_infer(now, observation)
            return self._command(now, observation)

    def _accept(self, result) -> None:
        """Take an inference's result (a callable giving (chunk, latency), or raising its error).
        A policy's failure is reported and held, never raised into the control loop."""
        try:
            chunk, latency = result()
            actions = chunk.to_array(self.space)  # a chunk of the wrong layout raises here
            if not np.all(np.isfinite(actions)):  # refused whole: no NaN ever reaches a command
                raise PolicyError(f"the policy's chunk contains NaN or Inf at steps "
                                  f"{sorted(set(np.nonzero(~np.isfinite(actions))[0].tolist()))}; expected finite targets")
        except Exception as exc:
            self._fail(exc)
            return
        self._chunks.append(_Live(chunk.stamp, actions))
        self._hold_reason = self._fault = ""
        self.stats.inferences += 1
        self.stats.latencies.append(latency)

    def _fail(self, error: BaseException) -> None:
        message = str(error) if isinstance(error, PolicyError) else f"{type(error).__name__}: {error}"
        self._chunks.clear()
        if isinstance(error, DeadlineMiss):  # no answer in time: held like a miss with on_deadline_miss hold
            self.stats.deadline_misses += 1
            self.stats.last_miss = message
            self._hold_reason = f"deadline miss: {message}"
            return
        self.stats.errors += 1
        self.stats.last_error = self._fault = message
        self._hold_reason = f"policy error: {self._fault}"

    def _collect(self, now: float) -> None:
        inflight = self._inflight
        if inflight is None:
            return
        if inflight.future.done():
            self._inflight = None
            if inflight.missed:
                self.stats.discarded += 1
            else:
                self._accept(inflight.future.result)
        elif not inflight.missed and now - inflight.submitted > self.config.deadline_s:
            inflight.missed = True
            self.stats.deadline_misses += 1
            if self.config.on_deadline_miss == "hold":
                self._chunks.clear()
                self._hold_reason = f"deadline miss: inference took longer than {self.config.deadline_s:g} s"

    def wants_observation(self, now: float) -> bool:
        """Whether step(now, ...) will hand its observation to the policy: a caller that renders
        images for it (the in-process runner) renders only then."""
        with self._lock:
            self._collect(now)
            return self._inflight is None and now + TICK_EPS >= self._next_request

    def _maybe_infer(self, now: float, observation: Observation) -> None:
        if self._inflight is not None or now + TICK_EPS < self._next_request:
            return
        if now - observation.stamp > self.config.max_observation_age_s:
            if observation.stamp != self._last_stale_stamp:
                self._last_stale_stamp = observation.stamp
                self.stats.stale_observations += 1
            return
        self._next_request = now + self.replan_steps * self.dt
        if self._executor is None:
            self._accept(lambda: _timed_act(self._act, observation))
            return
        self._inflight = _Inflight(self._executor.submit(_timed_act, self._act, observation), now)

    # -- what to send ---------------------------------------------------------------------------------
    def _window(self, live: _Live) -> float:
        span = len(live.actions) * self.dt
        limit = self.config.max_action_age_s
        return span if limit is None else min(span, limit)

    def _value(self, live: _Live, now: float) -> np.ndarray:
        position = min(max((now - live.stamp) / self.dt, 0.0), len(live.actions) - 1.0)
        i = int(math.floor(position))
        if i >= len(live.actions) - 1:
            return live.actions[-1]
        frac = position - i
        return (1.0 - frac) * live.actions[i] + frac * live.actions[i + 1]

    def _command(self, now: float, observation: Observation | None) -> Command | None:
        self._chunks = [c for c in self._chunks if now - c.stamp < self._window(c)]
        reason = self._hold_reason
        target = None
        if not reason and self._chunks:
            if self.config.ensemble_coefficient is None:
                target = self._value(self._chunks[-1], now)
            else:  # oldest first, as ACT weighs them
                weights = np.exp(-self.config.ensemble_coefficient * np.arange(len(self._chunks)))
                values = np.stack([self._value(c, now) for c in self._chunks])
                target = weights @ values / weights.sum()
        elif not reason:
            reason = "no chunk to execute" if self._last is not None else "waiting for the first chunk"
        if target is None:
            target = self._last
            if target is None and observation is not None:
                try:
                    target = observation.state(self.space)
                except PolicyError:  # it observes less than it commands: nothing to hold yet
                    return None
            if target is None:
                return None
        self._last = target
        chunk = ActionChunk.from_array(self.space, target, now, self.dt)
        return Command(now, {g: v[0] for g, v in chunk.joints.items()},
                       {g: float(v[0]) for g, v in chunk.grippers.items()}, reason)
