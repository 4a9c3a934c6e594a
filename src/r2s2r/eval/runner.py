"""The trial runner: one trial = (policy, task, perturbation, seed), run in-process, deterministic.

A trial is what driver_node + policy_node do over DDS, in one thread and as fast as the CPU
allows: `SimHardware` stepped by `ControlLoop` at the robot's control rate, the policy's
`PolicyRuntime` (synchronous) asked every 1 / task.control_rate_hz, its commands delayed by
the perturbation's command latency, the task judging the twin. Nothing renders unless an
observer asks for it (replay), so a trial costs its physics, its control loop and its policy.

Determinism: the same TrialSpec gives the same TrialResult bit for bit (except `wall_s`),
whatever ran before it in the worker and whichever worker runs it. The twin is reset from
its seed, the global numpy / random / torch generators are seeded from the trial's seed, and
a compiled twin is reused only for the identical scene (a geometry perturbation means another
scene, so another compile), with everything a trial changes in the model set again by
`Task.start`.

Trials of a policy that takes a batch (a tensor model with a free batch dimension) run in
lockstep batches (`TrialWorker.run_batch`): each on its own twin, one policy call per tick for
the trials that infer then, every call padded to whole blocks of rows so that each trial's
result is the one it gives alone (policy.tensor says why).

A trial whose physics goes unstable (MuJoCo finds NaN or huge values and resets the state)
ends at that tick as a failure at stage `sim_unstable` with margin 0: the twin's fault, shown
in the atlas like any other failure so it gets fixed, never taken for the policy's.

Campaigns (`run_trials`) fan trials out on a local process pool (default) or on Ray
(`backend="ray"`), write each result to the store as it ends, skip trials already stored
(resume) and show a progress bar with an ETA. The same workers run other jobs too
(`TrialPool.map`: the system identification's CMA-ES generations), each from a `JobContext`
a worker turns into state once and keeps.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import signal
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import mujoco
import numpy as np

from r2s2r.contract.types import CommandError
from r2s2r.eval.tasks import Outcome
from r2s2r.hardware.driver import Driver
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.policy import Observation, PolicyMetadata, PolicyRuntime, RuntimeConfig, load_policy, read_policy_config
from r2s2r.policy.observation import JointLayout
from r2s2r.robots import get_robot
from r2s2r.sim.twin import Twin

BACKENDS = ("process", "ray")
TWIN_CACHE = 4  # compiled scenes a worker keeps (each a few MB)
JOB_CACHE = 2  # job states a worker keeps (a fit's loaded episodes and compiled twin)
UNSTABLE = "sim_unstable"  # the stage of a trial whose physics blew up (not the policy's failure)
_BAD_STATE = (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL, mujoco.mjtWarning.mjWARN_BADQACC)


def trial_seed(campaign_seed: int, index: int) -> int:
    """The seed of trial `index` of a campaign: independent streams per (campaign seed, index)."""
    return int(np.random.SeedSequence([int(campaign_seed), int(index)]).generate_state(1, np.uint32)[0])


def _canonical(perturbation: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((str(k), float(v)) for k, v in perturbation.items()))


@dataclass(frozen=True)
class TrialSpec:
    """What a trial is; its id is a hash of exactly these inputs."""

    policy: str
    task: str
    perturbation: tuple[tuple[str, float], ...] = ()  # (factor, value) sorted by factor
    seed: int = 0
    control_rate_hz: float | None = None  # None: the robot's own control rate

    @classmethod
    def of(cls, policy: str, task: str, perturbation: Mapping[str, float] | None = None, seed: int = 0,
           control_rate_hz: float | None = None) -> "TrialSpec":
        return cls(policy, task, _canonical(perturbation or {}), int(seed),
                   None if control_rate_hz is None else float(control_rate_hz))

    @property
    def values(self) -> dict[str, float]:
        return dict(self.perturbation)

    @property
    def id(self) -> str:
        key = {"policy": self.policy, "task": self.task, "seed": self.seed,
               "perturbation": [[k, v.hex()] for k, v in self.perturbation]}  # hex: exact floats
        if self.control_rate_hz is not None:
            key["control_rate_hz"] = self.control_rate_hz.hex()
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrialResult:
    id: str
    policy: str
    task: str
    seed: int
    control_rate_hz: float | None
    perturbation: dict[str, float]
    success: bool
    margin: float
    stage: str
    sim_time_s: float  # simulated duration of the trial
    wall_s: float  # how long it took to run (the only field that differs between runs)
    metrics: dict[str, float] = field(default_factory=dict)
    # Why the policy failed to act, when it did (a refused command, an exception, a missed
    # deadline): the first such message and the robot time, seconds into the trial.
    detail: str = ""

    @property
    def spec(self) -> TrialSpec:
        return TrialSpec.of(self.policy, self.task, self.perturbation, self.seed, self.control_rate_hz)

    def deterministic(self) -> tuple:
        """Everything but the wall time: equal for every run of the same trial."""
        return (self.id, self.policy, self.task, self.seed, self.control_rate_hz,
                tuple(sorted(self.perturbation.items())), self.success, self.margin, self.stage, self.sim_time_s,
                tuple(sorted(self.metrics.items())), self.detail)


class TrialError(RuntimeError):
    """A trial raised: the message names its inputs so it can be rerun alone."""


class TrialObserver:
    """Sees a trial as it runs (replay records video and bags through one); it must not change
    the twin's state. Called after set-up, after every policy tick, and at the end."""

    def start(self, twin, loop: ControlLoop, task) -> None:
        """The trial is set up at its initial state."""

    def tick(self, twin, loop: ControlLoop, observation: Observation, command) -> None:
        """One policy tick has been executed: the twin is at the next tick's time."""

    def end(self, twin, outcome) -> None:
        """The trial is judged."""


class RecordingObserver(TrialObserver, ABC):
    """An observer that records what it sees (`TrialPool.run_recorded`): one per trial, made in
    the worker, `recorded()` sent back with the trial's result."""

    @abstractmethod
    def recorded(self) -> Any:
        """What it recorded (picklable)."""


class JobContext(Protocol):
    """What a worker needs for a job other than a trial (`TrialPool.map`): small and picklable,
    it travels with every item; `build()` makes the state the job's function runs on (episodes
    loaded, a twin compiled), once per worker and `key`, kept for the calls that follow."""

    key: str

    def build(self) -> Any:
        ...


class TrialWorker:
    """Runs trials, one at a time or a batch in lockstep (`run_batch`); keeps loaded tasks,
    policies and compiled twins between them, and the states of other jobs (`job`). `threads`:
    how many threads a torch policy may use (a pool worker: 1, so workers do not fight over the
    cores); None leaves torch's default. `timing`: wall seconds spent so far rendering, in the
    policy, in physics and control, and judging (the benchmarks read it)."""

    def __init__(self, threads: int | None = None):
        self.threads = threads
        self._tasks: dict = {}
        self._policies: dict = {}
        self._twins: OrderedDict = OrderedDict()
        self._in_use: set = set()  # keys of the twins running trials now: never evicted
        self._renderers: dict = {}  # by the key of a cached twin: its cameras' renderer
        self._render_contexts = None  # sim.render.SharedContexts of every twin's renderer, made on first use
        self._states: OrderedDict = OrderedDict()
        self.timing = dict.fromkeys(TIMING, 0.0)

    def job(self, fn: Callable[[Any, Any], Any], context: JobContext | None, item):
        """fn(state, item), the state built from `context` on its first use here (None: None)."""
        if context is None:
            return fn(None, item)
        state = self._states.pop(context.key, None)
        if state is None:
            state = context.build()
        self._states[context.key] = state
        while len(self._states) > JOB_CACHE:
            _, old = self._states.popitem(last=False)
            if hasattr(old, "close"):
                old.close()
        return fn(state, item)

    def task(self, name: str):
        if name not in self._tasks:
            from r2s2r.eval.tasks import load_task
            self._tasks[name] = load_task(name)
        return self._tasks[name]

    def policy(self, uri: str, robot) -> tuple[object, RuntimeConfig]:
        key = (uri, robot.name)
        if key not in self._policies:
            config = read_policy_config(uri)
            policy = load_policy(config, PolicyMetadata.for_robot(robot))
            # The engine's clock waits for inference: the policy's own runtime settings, synchronous.
            runtime = dict(config.runtime, asynchronous=False)
            self._policies[key] = (policy, RuntimeConfig.from_dict(runtime, f"{config.source}: runtime"))
            torch = sys.modules.get("torch")
            if torch is not None and self.threads is not None:
                torch.set_num_threads(self.threads)
        return self._policies[key]

    def twin(self, task_name: str, scene, slot: int = 0) -> Twin:
        """A compiled twin of `scene` for the trial in `slot` of a batch (each trial its own twin)."""
        key = (task_name, scene, slot)  # tasks may change the model differently (grip priorities)
        twin = self._twins.pop(key, None)
        if twin is None:
            twin = Twin(scene)
        self._twins[key] = twin
        self._in_use.add(key)
        for old in [k for k in self._twins if k not in self._in_use][:max(0, len(self._twins) - TWIN_CACHE)]:
            del self._twins[old]
            renderer = self._renderers.pop(old, None)
            if renderer is not None:
                renderer.close()
        return twin

    def renderer(self, task_name: str, scene, twin: Twin, slot: int = 0):
        """The renderer of a cached twin's cameras (sim.render.TwinRenderer, the renderer the driver's
        cameras use, its frames pixel for pixel), made on first use: a policy that observes no
        camera never makes one. The twins of perturbed scenes share GL contexts (SharedContexts)."""
        from r2s2r.sim.render import SharedContexts, TwinRenderer
        key = (task_name, scene, slot)  # evicted with its twin (twin())
        if key not in self._renderers:
            self._render_contexts = self._render_contexts or SharedContexts()
            self._renderers[key] = TwinRenderer(twin, shared=self._render_contexts)
        return self._renderers[key]

    def run(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        return self.run_batch([spec], observer)[0]

    def run_recorded(self, spec: TrialSpec, recorder: Callable[[], "RecordingObserver"]) -> tuple[TrialResult, Any]:
        """The trial, watched by an observer of its own made by `recorder()`; its result and what
        the observer recorded."""
        observer = recorder()
        return self.run(spec, observer), observer.recorded()

    def run_batch(self, specs: Sequence[TrialSpec], observer: TrialObserver | None = None) -> list[TrialResult]:
        """The trials of `specs`, in their order. Trials of one policy that takes a batch
        (`act_batch`) run in lockstep, each on its own twin, one policy call per tick for every
        trial that infers then; each result is the one `run` gives alone, bit for bit. Other
        policies run one trial after another."""
        results: list[TrialResult | None] = [None] * len(specs)
        groups: dict = {}
        for i, spec in enumerate(specs):
            groups.setdefault((spec.policy, spec.task), []).append(i)
        for indices in groups.values():
            spec = specs[indices[0]]
            policy, _ = self._guarded(spec, self._policy_of, spec)
            width = len(indices) if getattr(policy, "accepts_batch", False) else 1
            for first in range(0, len(indices), width):
                chunk = indices[first:first + width]
                for i, result in zip(chunk, self._lockstep([specs[i] for i in chunk], observer)):
                    results[i] = result
        return results

    def _lockstep(self, specs: Sequence[TrialSpec], observer: TrialObserver | None) -> list[TrialResult]:
        trials: list[_Trial] = []
        held = set(self._in_use)  # afterwards, this batch's twins (a failed set-up's too) may be evicted
        try:
            for slot, spec in enumerate(specs):
                trials.append(self._guarded(spec, _Trial, self, spec, slot, observer or TrialObserver()))
            policy = trials[0].policy
            batched = getattr(policy, "accepts_batch", False)  # run_batch gives others one trial at a time
            running = list(trials)
            while running:
                wanting = [t for t in running if t.wants_observation()]
                clock = time.perf_counter()
                observations = {id(t): self._guarded(t.spec, t.observe, t in wanting) for t in running}
                self.timing["render"] += time.perf_counter() - clock
                if batched and wanting:
                    clock = time.perf_counter()
                    chunks = _act_batch(policy, [observations[id(t)] for t in wanting])
                    self.timing["policy"] += time.perf_counter() - clock
                    for t, chunk in zip(wanting, chunks):
                        t.prefetched = chunk
                for t in running:
                    self._guarded(t.spec, t.tick, observations[id(t)])
                running = [t for t in running if not t.finished]
            return [self._guarded(t.spec, t.result) for t in trials]
        finally:
            self._in_use = held

    def _policy_of(self, spec: TrialSpec) -> tuple[object, RuntimeConfig]:
        return self.policy(spec.policy, get_robot(self.task(spec.task).robot))

    @staticmethod
    def _guarded(spec: TrialSpec, fn: Callable[..., Any], *args):
        """fn(*args); an error is the trial's, named with everything that reproduces it."""
        try:
            return fn(*args)
        except Exception as exc:
            raise TrialError(f"trial {spec.id} (policy {spec.policy}, task {spec.task}, seed {spec.seed}, "
                             f"perturbation {spec.values}) failed: {type(exc).__name__}: {exc}") from exc


TIMING = ("render", "policy", "physics", "task")  # TrialWorker.timing's keys


def _act_batch(policy, observations: list[Observation]) -> list:
    """One chunk, or the error the trial's policy raised, per observation. A call that raises is
    retried one observation at a time, so each trial fails only where it would alone."""
    try:
        return policy.act_batch(observations)
    except Exception as exc:
        if len(observations) == 1:
            return [exc]
    return [_act_batch(policy, [o])[0] for o in observations]


class _Trial:
    """One trial in progress on a twin of its own: set up, then one policy tick per `tick`."""

    def __init__(self, worker: TrialWorker, spec: TrialSpec, slot: int, observer: TrialObserver):
        self.wall0 = time.perf_counter()
        self.worker, self.spec, self.observer = worker, spec, observer
        _seed_globals(spec.seed)
        # A task object per trial in flight: it keeps its episode's state (TaskLogic).
        self.task = task = copy.copy(worker.task(spec.task))
        task.new_episode(spec.values)
        scene = task.scene(spec.values)
        hardware = SimHardware.from_twin(worker.twin(spec.task, scene, slot), spec.seed)
        self.driver = Driver(hardware, control_rate_hz=spec.control_rate_hz)  # driver_node's core
        self.driver.start()
        self.twin = twin = hardware.twin
        self.loop = loop = self.driver.loop
        task.start(twin)
        self.driver.hold_here()
        self.sizes = task.object_sizes(twin)  # fixed for the trial: the scene built them
        self.policy, config = worker.policy(spec.policy, hardware.robot)
        self.cameras = tuple(self.policy.metadata.observation.cameras)
        self.renderer = worker.renderer(spec.task, scene, twin, slot) if self.cameras else None
        self.prefetched = None  # the chunk (or the error) this tick's batched call made for this trial
        self.runtime = PolicyRuntime(self.policy, config, act=self._prefetched_act)
        self.runtime.reset()
        self.layout = JointLayout.from_robot(hardware.robot)
        self.start = twin.time
        self.limit = self.start + task.time_limit_s
        self.period = 1.0 / task.control_rate_hz
        self.ticks = 0
        self.timed_out = True
        self.finished = twin.time >= self.limit - 1e-9
        self.failed_to_act = FailureToAct()
        observer.start(twin, loop, task)

    def _prefetched_act(self, observation: Observation):
        """The chunk the batch's call made for this trial; alone, the policy's own act."""
        if self.prefetched is None:
            return self.policy.act(observation)
        chunk, self.prefetched = self.prefetched, None
        if isinstance(chunk, Exception):
            raise chunk
        return chunk

    def wants_observation(self) -> bool:
        return self.runtime.wants_observation(self.twin.time)

    def observe(self, for_policy: bool) -> Observation:
        """The observation now; the policy's cameras rendered only when it will see them (`for_policy`)."""
        now = self.twin.time
        joints, grippers = self.layout.split(self.loop.sample())
        # The policy's cameras, rendered from the twin's state now when the policy will see them
        # (as a camera publishing on the tick would).
        images = {c: self.renderer.rgb(c) for c in self.cameras} \
            if self.renderer is not None and for_policy else {}
        return Observation(now, joints, grippers, images=images, objects=self.task.object_poses(self.twin),
                           object_sizes=self.sizes)

    def tick(self, observation: Observation) -> None:
        timing, twin, now = self.worker.timing, self.twin, self.twin.time
        clock = time.perf_counter()
        command = self.runtime.step(now, observation)
        self.failed_to_act.note_runtime(self.runtime.stats, now - self.start)
        if command is not None:  # a perturbation's latency is the twin's (apply_runtime)
            for error in send_command(self.driver, command):
                self.failed_to_act.note(INVALID_ACTION, error, now - self.start)
        physics = time.perf_counter()
        timing["policy"] += physics - clock
        self.ticks += 1
        self.driver.step(self.start + self.ticks * self.period)  # every cycle of the tick in one go
        judging = time.perf_counter()
        timing["physics"] += judging - physics
        self.task.step(twin)
        self.observer.tick(twin, self.loop, observation, command)
        if _unstable(twin) or self.task.done(twin):
            self.timed_out, self.finished = False, True
        elif twin.time >= self.limit - 1e-9:
            self.finished = True
        timing["task"] += time.perf_counter() - judging

    def result(self) -> TrialResult:
        spec, twin, task = self.spec, self.twin, self.task
        outcome = task.outcome(twin, self.timed_out)
        if _unstable(twin):  # MuJoCo reset the state: what the task sees now is not this trial's
            outcome = Outcome(False, 0.0, UNSTABLE, {"unstable_at_tick": float(self.ticks)})
        if not outcome.success and self.failed_to_act.stage:  # the failure to act is why, not the stage it ended in
            outcome = Outcome(False, outcome.margin, self.failed_to_act.stage, outcome.metrics)
        self.observer.end(twin, outcome)
        metrics = {str(k): float(v) for k, v in outcome.metrics.items()}
        metrics["commands_rejected"] = float(sum(self.loop.controller.stats.rejected.values()))
        return TrialResult(id=spec.id, policy=spec.policy, task=spec.task, seed=spec.seed,
                           control_rate_hz=spec.control_rate_hz, perturbation=spec.values,
                           success=bool(outcome.success), margin=float(outcome.margin), stage=str(outcome.stage),
                           sim_time_s=twin.time - self.start, wall_s=time.perf_counter() - self.wall0,
                           metrics=metrics, detail=self.failed_to_act.detail)


def check_policy(source: str, task):
    """Load the policy once, as every worker will, and check that it fits the task: its robot's
    joint groups and grippers, and the cameras of the task's scene. Raises PolicyError in one line
    that names the problem, before any worker starts; returns the loaded policy."""
    from r2s2r.policy.types import PolicyError
    robot = get_robot(task.robot)
    try:
        config = read_policy_config(source)
        policy = load_policy(config, PolicyMetadata.for_robot(robot))
        RuntimeConfig.from_dict(dict(config.runtime, asynchronous=False), f"{config.source}: runtime")
    except PolicyError:
        raise
    except Exception as exc:  # a missing file, an unimportable class, a bad config: the user's to fix
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise PolicyError(f"policy {source}: {type(exc).__name__}: {first}") from None
    metadata = policy.metadata
    layout = JointLayout.from_robot(robot)
    try:
        layout.check(metadata.observation)
        layout.check(metadata.action)
    except PolicyError as exc:
        raise PolicyError(f"policy {source} does not fit {robot.name}: {exc}") from None
    cameras = [c.name for c in task.scene().all_cameras()]
    missing = [c for c in metadata.observation.cameras if c not in cameras]
    if missing:
        raise PolicyError(f"policy {source} observes cameras {', '.join(missing)}; task {task.name}'s scene has "
                          f"{', '.join(cameras) or 'none'}")
    return policy


# Failure stages of a policy that failed to act (eval.tasks' stages say how a task failed).
INVALID_ACTION, POLICY_ERROR, DEADLINE = "invalid_action", "policy_error", "deadline"


@dataclass
class FailureToAct:
    """The first way a trial's policy failed to act: a command the controller refused (the
    driver's validation and collision check), an exception, a missed deadline."""

    stage: str = ""
    detail: str = ""
    _errors: int = 0
    _misses: int = 0

    def note(self, stage: str, message: str, t: float) -> None:
        if not self.stage:
            self.stage, self.detail = stage, f"{message} (at {t:.3f} s)"

    def note_runtime(self, stats, t: float) -> None:
        """What PolicyRuntime counted since the last call: it holds the arm on an error or a miss."""
        if stats.errors > self._errors:
            self.note(POLICY_ERROR, stats.last_error or "the policy raised", t)
        if stats.deadline_misses > self._misses:
            self.note(DEADLINE, stats.last_miss or "the policy missed its inference deadline", t)
        self._errors, self._misses = stats.errors, stats.deadline_misses


def send_command(driver: Driver, command) -> list[str]:
    """A policy's Command into the driver, as driver_node's topics deliver it: each group's
    targets, each gripper's opening. A command the driver refuses (a limit, NaN, a wrong shape,
    the collision check) is dropped and the arm holds; returns the refusals' messages."""
    errors = []
    for group, target in command.joints.items():
        try:
            driver.command_positions(group, target)
        except CommandError as error:
            errors.append(str(error))
    for gripper, opening in command.grippers.items():
        try:
            driver.command_gripper(gripper, [opening])
        except CommandError as error:
            errors.append(str(error))
    return errors


def _unstable(twin) -> bool:
    """MuJoCo met NaN / Inf / huge values in the state and reset it (it counts each such warning)."""
    warnings = twin.data.warning
    return any(warnings[w].number > 0 for w in _BAD_STATE)


def _seed_globals(seed: int) -> None:
    """Policies that draw from the global generators draw the same numbers in every run."""
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


# -- process pool -----------------------------------------------------------------------------------
_WORKER: TrialWorker | None = None


def _pool_init(threads: int) -> None:
    global _WORKER
    # Ctrl-C reaches the whole process group: the parent stops the campaign, workers finish quietly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER = TrialWorker(threads)


def _pool_run(specs: Sequence[TrialSpec]) -> list[TrialResult]:
    return _WORKER.run_batch(specs)


def _pool_recorded(spec: TrialSpec, recorder) -> tuple[TrialResult, Any]:
    return _WORKER.run_recorded(spec, recorder)


def _pool_job(fn, context, item):
    return _WORKER.job(fn, context, item)


def _start_pool(workers: int) -> ProcessPoolExecutor:
    """A process pool of `workers`, started now. spawn: a fresh interpreter per worker, no inherited
    threads, GL contexts or locks. The workers start with Ctrl-C ignored (an interpreter started with
    SIGINT ignored keeps it so): the parent stops the campaign, and a worker still importing when
    Ctrl-C comes prints no traceback."""
    import multiprocessing
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_pool_init,
                               initargs=(1,))
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        started = [pool.submit(int) for _ in range(workers)]  # each submit starts a worker if none is idle
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    for future in started:
        future.result()
    return pool


# -- campaigns ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Planned:
    """A trial's place in a campaign: its index and what proposed it (a sampler, refinement)."""

    index: int
    spec: TrialSpec
    sampler: str = "uniform"


class TrialPool:
    """Where trials run: this process (one worker), a process pool, or Ray actors; started on
    first use and kept until closed, so a search's rounds reuse warm workers (their loaded
    tasks, policies and compiled twins). `map` runs other jobs on the same workers: a
    module-level function of (state, item), the state built once per worker from a
    `JobContext` and kept between calls (a fit's generations reuse its loaded episodes)."""

    def __init__(self, workers: int = 1, backend: str = "process", address: str | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        if workers < 1:
            raise ValueError(f"workers is {workers}; expected 1 or more")
        self.workers, self.backend, self.address = workers, backend, address
        self._local: TrialWorker | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._ray = None

    def run(self, specs: Sequence[TrialSpec], batch: int = 1) -> Iterable[TrialResult]:
        """The results of `specs`, in the order they finish. `batch`: up to this many trials of one
        policy run in lockstep on a worker (TrialWorker.run_batch; their results come together)."""
        if not specs:
            return
        if batch < 1:
            raise ValueError(f"batch is {batch}; expected 1 or more")
        batches = self._batches(specs, batch)
        if self.backend == "ray":
            for results in self._ray_workers().run(batches):
                yield from results
        elif self.workers == 1:
            self._local = self._local or TrialWorker()
            for batch in batches:
                yield from self._local.run_batch(batch)
        else:
            for _, results in self._run_pool(_pool_run, [(batch,) for batch in batches]):
                yield from results

    def run_recorded(self, specs: Sequence[TrialSpec], recorder: Callable[[], RecordingObserver]
                     ) -> Iterable[tuple[TrialResult, Any]]:
        """(result, recorded) of each of `specs` in the order they finish, each trial watched by an
        observer of its own made by `recorder()` in the worker (a picklable factory: a class or a
        functools.partial of module-level names)."""
        if not specs:
            return
        if self.backend == "ray":
            yield from self._ray_workers().run_recorded(specs, recorder)
        elif self.workers == 1:
            self._local = self._local or TrialWorker()
            for spec in specs:
                yield self._local.run_recorded(spec, recorder)
        else:
            for _, pair in self._run_pool(_pool_recorded, [(spec, recorder) for spec in specs]):
                yield pair

    def _batches(self, specs: Sequence[TrialSpec], batch: int) -> list[list[TrialSpec]]:
        """The specs in batches for TrialWorker.run_batch: one policy and task per batch, at most
        `batch` trials, and no more than an even share per worker (every worker gets some)."""
        groups: dict = {}
        for spec in specs:
            groups.setdefault((spec.policy, spec.task), []).append(spec)
        batches = []
        for group in groups.values():
            size = max(1, min(batch, -(-len(group) // self.workers)))
            batches += [group[i:i + size] for i in range(0, len(group), size)]
        return batches

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence, context: JobContext | None = None) -> list:
        """[fn(state, item) for item in items], in the items' order, each on whichever worker is
        free; `state` is what `context.build()` made on that worker (once per context key)."""
        items = list(items)
        if not items:
            return []
        if self.backend == "ray":
            return self._ray_workers().map(fn, items, context)
        if self.workers == 1:
            self._local = self._local or TrialWorker()
            return [self._local.job(fn, context, item) for item in items]
        done = dict(self._run_pool(_pool_job, [(fn, context, item) for item in items]))
        return [done[i] for i in range(len(items))]

    def _ray_workers(self):
        if self._ray is None:
            from r2s2r.eval.ray_backend import RayWorkers
            self._ray = RayWorkers(self.workers, self.address)
        return self._ray

    def _run_pool(self, fn, calls: Sequence[tuple]) -> Iterable[tuple[int, Any]]:
        """(index, fn(*calls[index])) on the process pool, in the order they finish."""
        if self._pool is None:
            self._pool = _start_pool(self.workers)
        queue = list(reversed(list(enumerate(calls))))
        running: dict = {}  # future -> its call's index
        try:
            while queue or running:
                while queue and len(running) < 2 * self.workers:  # a few ahead, so no worker waits
                    index, args = queue.pop()
                    running[self._pool.submit(fn, *args)] = index
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    yield running.pop(future), future.result()
        finally:
            for future in running:
                future.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._ray is not None:
            self._ray.close()
            self._ray = None

    def __enter__(self) -> "TrialPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_trials(planned: Sequence[Planned], store, campaign: str, workers: int = 1, backend: str = "process",
               address: str | None = None, progress: bool = True, bar=None,
               pool: TrialPool | None = None, batch: int = 1) -> list[TrialResult]:
    """Run every planned trial not yet in `store`, storing each as it ends; return all of them
    (stored and new) in plan order. Trials already stored by another campaign are linked, not rerun.
    `bar`: a progress bar (`progress_bar`) the caller keeps over several calls; by default one of
    this call's own (when `progress`). `pool`: workers the caller keeps over several calls; by
    default `workers` on `backend`, started for this call. `batch`: trials a worker runs in
    lockstep (TrialPool.run); the results are the same whatever it is."""
    if pool is None:
        with TrialPool(workers, backend, address) as own_pool:
            return run_trials(planned, store, campaign, progress=progress, bar=bar, pool=own_pool, batch=batch)
    stored = store.stored_ids(p.spec.id for p in planned)
    pending: list[Planned] = []
    seen: set[str] = set()
    for p in planned:
        if p.spec.id in stored:
            store.link(p.spec.id, campaign, p.index, p.sampler)
        elif p.spec.id not in seen:  # the same trial twice in one plan runs once
            seen.add(p.spec.id)
            pending.append(p)
    by_id: dict[str, list[Planned]] = {}
    for p in planned:
        by_id.setdefault(p.spec.id, []).append(p)

    own = bar is None
    if own:
        bar = progress_bar(len(planned), campaign, progress)
    add_stored(bar, len(planned) - len(pending))
    try:
        for result in pool.run([p.spec for p in pending], batch):
            for p in by_id[result.id]:
                store.add(result, campaign, p.index, p.sampler)
            bar.set_postfix_str(f"last: {result.stage} {result.margin:+.3f}", refresh=False)
            bar.update(1)
    finally:
        if own:
            bar.close()
    return [store.get(p.spec.id) for p in planned]


class _NoBar:
    total = 0

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def refresh(self) -> None:
        pass

    def set_description_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def add_stored(bar, count: int) -> None:
    """Count `count` trials found in the store on `bar` without counting them in its rate and ETA
    (a resumed campaign's rate is this run's)."""
    if count and not isinstance(bar, _NoBar):
        bar.n += count
        bar.last_print_n += count  # the rate's next step leaves them out
        bar.initial += count  # and so does its average
        bar.refresh()


def progress_bar(total: int, label: str, enabled: bool = True, unit: str = "trial"):
    """A progress bar with rate and ETA on stderr (tqdm), or one that shows nothing."""
    if not enabled:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=label, unit=unit, dynamic_ncols=True, smoothing=0.1, file=sys.stderr)


# -- campaigns of random perturbations (`r2s2r eval`) -------------------------------------------------------
def sample_perturbations(space, count: int, seed: int, factors: Sequence[str] | None = None,
                         nominal: bool = False, first: int = 0) -> list[dict[str, float]]:
    """Points `first` to `count - 1` of a perturbation space, trial i drawn uniformly from its own
    generator (seed, i), so a longer campaign extends a shorter one. `factors` limits what varies
    (the rest stay nominal); `nominal` varies nothing."""
    names = list(space.names) if factors is None else list(factors)
    for name in names:
        space.factor(name)  # raises, naming the known factors
    points = []
    for i in range(first, count):
        if nominal or not names:
            points.append({})
            continue
        rng = np.random.default_rng([int(seed), int(i)])
        u = rng.random(len(names))
        points.append({n: space.factor(n).from_unit(x) for n, x in zip(names, u)})
    return points


def plan_eval(policy: str, task, count: int, seed: int = 0, factors: Sequence[str] | None = None,
              nominal: bool = False, control_rate_hz: float | None = None,
              task_ref: str | None = None, envelope: str | None = None, first: int = 0) -> list[Planned]:
    """Trials `first` to `count - 1` of an evaluation campaign: perturbation and seed of trial i
    from (seed, i); within one of the space's named `envelope`s (narrower ranges) if given."""
    space = task.perturbations.within(envelope) if envelope else task.perturbations
    points = sample_perturbations(space, count, seed, factors, nominal, first)
    ref = task_ref or task.name
    phase = "nominal" if nominal else "uniform"
    return [Planned(i, TrialSpec.of(policy, ref, p, trial_seed(seed, i), control_rate_hz), phase)
            for i, p in enumerate(points, start=first)]


__all__ = ["TrialSpec", "TrialResult", "TrialWorker", "TrialObserver", "RecordingObserver", "TrialError", "Planned", "TrialPool",
           "JobContext", "send_command", "FailureToAct", "INVALID_ACTION", "POLICY_ERROR", "DEADLINE", "run_trials",
           "progress_bar", "add_stored", "check_policy", "plan_eval", "sample_perturbations", "trial_seed", "BACKENDS"]
