"""System identification: the twin's parameters that make its replay agree with the recording.

The time offset between the recorded commands and the states comes first. It matters more
than anything fitted after it: on data shifted by a single physics step, least squares still
converges, to gains and damping that absorb the shift, and reports success.

1. A model-free first estimate (`estimate_offset`): the cross-correlation, in a band above the
   arm's own response, of the measured joint efforts with the twin's under the recorded
   setpoints (a servo's effort follows its setpoint at once, its motion a servo time constant
   later).
2. CMA-ES (`cma`) over the model parameters and the latency together, from the spec's values
   and that estimate, on the episodes' first seconds: a global search out of the valleys
   where too little damping makes up for too much delay. A generation's candidates run on the
   trial runner's workers (`eval.runner.TrialPool.map`: a process pool, or Ray actors with
   `backend="ray"`), each worker loading the episodes once (`_FitJob`) and keeping them for the
   fit's generations; the costs come back in candidate order, so any number of workers gives
   the same fit. Its latency (`offset_s`) is where least squares starts from.
3. Bounded nonlinear least squares (`mujoco.sysid.optimize`: MuJoCo's own Levenberg-Marquardt
   with box bounds) on the model parameters (`real2sim.params` names: damping, armature,
   friction loss, actuator gains, object mass and friction) and the latency together, over the
   whole episodes, from several starts: CMA-ES's best, the priors with the offset's estimate,
   and points drawn across the box (`starts` in all). The setpoints are interpolated between
   physics steps, so the cost is smooth in the latency too; fitted apart, with the model held,
   a small error in it is made up for by the gains. Each residual evaluation is one batch of `mujoco.rollout`
   rollouts, one per finite-difference column, on `workers` threads. The residual stacks,
   weighted by their expected misfit (`SIGMA`), joint positions, velocities and efforts at
   every other joint state, gripper finger positions, and tracked object positions at every
   camera frame. The best start wins. Starts that end as well (within a 95 % interval's rise of
   the cost) but elsewhere show what else the data allows.
4. 95 % confidence intervals of every parameter, the latency included, from the Jacobian at
   the optimum (`mujoco.sysid.calculate_intervals`: (J^T J)^-1 s^2 by eigen-decomposition,
   infinite along directions the data does not constrain). They assume white residuals, so they
   are checked twice: a block bootstrap over `segment_s` pieces of the episodes (`_bootstrap`,
   linearised at the optimum) sees a misfit correlated in time, and the starts that fit as
   well show a valley. The interval reported is the widest of the three, and `why` says what
   widened it. A parameter whose interval is infinite or wider than `IDENTIFIABLE_REL` of its
   value is flagged as not identifiable from this data (link inertias next to armature from
   joint data alone, the friction of an object never pushed to slip). One that moves with
   another (|correlation| above `CORRELATED`) is noted as such. A narrow interval is believed
   only if moving the parameter that far, the others held, really raises the cost by a 95 %
   interval's worth: across a contact the finite-difference curvature can be huge where the
   cost is flat, and a parameter left at its prior was reported identifiable to +-2e-10.

Contacts make the residual rough (a grasp holds or slips), which least squares from afar does
not survive: identify the arm on an excitation episode (`proxy.excitation_script`, or any
free-space motion), then objects on grasp episodes with the arm's values held (`fixed`).

Why not mujoco.sysid's own residual (`build_residual_fn`): it compares predictions with one
measured signal layout per sequence on one time base; an episode holds joint states at the
robot's state rate and object poses only at camera frames, tracked from images. The rollouts,
the optimiser and the intervals are mujoco.sysid's and MuJoCo's own.
"""

from __future__ import annotations

import copy
import io
import math
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import mujoco
import mujoco.rollout
import numpy as np
import yaml

from r2s2r.data.episode import Episode
from r2s2r.eval.runner import TrialPool
from r2s2r.real2sim.replay import ReplayTwin, Setpoints, setpoints

IDENTIFIABLE_REL = 0.25
CORRELATED = 0.995
ADEQUATE_RATIO = 2.0  # bootstrap over curvature interval (median) above which the model is flagged
# Expected misfit of each residual block (its weight is 1 / sigma).
SIGMA = {"position": 5e-4, "velocity": 0.02, "effort": 0.5, "finger": 2e-4, "object": 0.003}


@dataclass(frozen=True, eq=False)
class ObjectTrack:
    """An object's measured positions on the episode's time base (from the cameras)."""

    name: str
    times: np.ndarray
    positions: np.ndarray  # N x 3, world frame
    quats: np.ndarray | None = None  # N x 4 (wxyz), world frame, where the tracker measures them


@dataclass(eq=False)
class FitData:
    """One episode prepared for fitting: its setpoints, initial state and measurements."""

    episode: Episode
    stream: Setpoints
    initial_state: np.ndarray
    joint_rows: np.ndarray  # indices of the joint states used
    joint_times: np.ndarray
    arm_cols: np.ndarray
    finger_cols: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    finger: np.ndarray
    tracks: tuple[ObjectTrack, ...] = ()


def prepare(rt: ReplayTwin, episode: Episode, tracks: Sequence[ObjectTrack] = (), stride: int = 2) -> FitData:
    stream = setpoints(episode, rt.twin)
    initial = rt.start(episode)
    j = episode.joints
    end = stream.nsteps * stream.timestep
    rows = np.arange(0, len(j.times), stride)
    rows = rows[j.times[rows] < end - 2 * stream.timestep]
    arm = j.columns(rt.twin.joint_names)
    fingers = j.columns(rt.robot.gripper_joint_names) if rt.robot.gripper_joint_names else np.zeros(0, int)
    pos = j.position[rows][:, arm]
    vel = j.velocity[rows][:, arm]
    eff = j.effort[rows][:, arm]
    fin = j.position[rows][:, fingers] if len(fingers) else np.zeros((len(rows), 0))
    return FitData(episode, stream, initial, rows, j.times[rows], arm, fingers, pos, vel, eff, fin,
                   tuple(t for t in tracks if t.name in rt.layout.objects))


def window(fd: FitData, seconds: float) -> FitData:
    """The first `seconds` of a prepared episode (a cheap stand-in for a global search)."""
    n = min(fd.stream.nsteps, int(round(seconds / fd.stream.timestep)))
    stream = Setpoints(fd.stream.timestep, fd.stream.arm[:n], fd.stream.grippers[:n], fd.stream.rejected)
    keep = fd.joint_times < (n - 2) * fd.stream.timestep
    tracks = tuple(ObjectTrack(t.name, t.times[t.times < n * fd.stream.timestep],
                               t.positions[t.times < n * fd.stream.timestep]) for t in fd.tracks)
    return FitData(fd.episode, stream, fd.initial_state, fd.joint_rows[keep], fd.joint_times[keep], fd.arm_cols,
                   fd.finger_cols, fd.position[keep], fd.velocity[keep], fd.effort[keep], fd.finger[keep], tracks)


class Evaluator:
    """Batched rollouts of prepared episodes for many parameter vectors at once."""

    def __init__(self, rt: ReplayTwin, data: Sequence[FitData], names: Sequence[str], threads: int = 1,
                 use: Sequence[str] = ("position", "velocity", "effort", "finger", "object")):
        self.rt = rt
        self.data = list(data)
        self.names = list(names)
        self.use = set(use)
        self.threads = max(1, threads)
        self.base = rt.model
        self._rollout = mujoco.rollout.Rollout(nthread=self.threads if self.threads > 1 else 0)
        self._datas = [mujoco.MjData(self.base) for _ in range(self.threads)]
        self.evaluations = 0
        self.weights: np.ndarray | None = None  # per residual entry (a bootstrap's segment counts)

    def close(self) -> None:
        self._rollout.close()

    def model_for(self, values: Mapping[str, float]) -> mujoco.MjModel:
        model = copy.copy(self.base)
        self.rt.parameters.apply(model, values)
        return model

    def rollouts(self, value_sets: Sequence[Mapping[str, float]], fixed: Mapping[str, float]) -> list[list[np.ndarray]]:
        """Sensor rows of every episode for every value set: out[k][e] is nsteps x nsensordata."""
        out = [[None] * len(self.data) for _ in value_sets]
        models = [self.model_for({**fixed, **v}) for v in value_sets]
        for e, fd in enumerate(self.data):
            controls = []
            for v in value_sets:
                latency = float({**fixed, **v}.get("latency_s", self.rt.latency_s))
                controls.append(self.rt.controls(fd.stream, latency))
            _, sensordata = self._rollout.rollout(models, self._datas, fd.initial_state[None, :], np.stack(controls),
                                                  nstep=fd.stream.nsteps)
            for k in range(len(value_sets)):
                out[k][e] = sensordata[k]
        self.evaluations += len(value_sets)
        return out

    def residual_of(self, rows_per_episode: list[np.ndarray], times: list | None = None) -> np.ndarray:
        """The weighted residual of one rollout per episode; `times`, when given, receives each
        entry's (episode, time) in the same order (the segments a bootstrap resamples)."""
        layout = self.rt.layout
        parts = []

        def add(block: np.ndarray, episode: int, at_times: np.ndarray) -> None:
            parts.append(block.ravel())
            if times is not None:  # a block is rows x columns, raveled row by row
                t = np.repeat(at_times, block.size // max(len(at_times), 1))
                times.append(np.stack([np.full(len(t), episode, float), t], axis=1))

        for e, (fd, rows) in enumerate(zip(self.data, rows_per_episode)):
            dt = fd.stream.timestep
            idx = np.clip(fd.joint_times / dt, 0, len(rows) - 1)
            lo = np.floor(idx).astype(int)
            hi = np.minimum(lo + 1, len(rows) - 1)
            w = (idx - lo)[:, None]
            at = rows[lo] * (1 - w) + rows[hi] * w
            narm = layout.narm
            jt = fd.joint_times
            if "position" in self.use:
                add((layout.position(at)[:, :narm] - fd.position) / SIGMA["position"], e, jt)
            if "velocity" in self.use:
                add((layout.velocity(at)[:, :narm] - fd.velocity) / SIGMA["velocity"], e, jt)
            if "effort" in self.use and np.isfinite(fd.effort).all():
                add((layout.effort(at) - fd.effort) / SIGMA["effort"], e, jt)
            if "finger" in self.use and fd.finger.size:
                add((layout.position(at)[:, narm:] - fd.finger) / SIGMA["finger"], e, jt)
            if "object" in self.use:
                for track in fd.tracks:
                    k = layout.objects.index(track.name)
                    i = np.clip(np.round(track.times / dt).astype(int), 0, len(rows) - 1)
                    pred = layout.object_pos(rows[i])[:, k]
                    add((pred - track.positions) / SIGMA["object"], e, track.times)
        r = np.concatenate(parts) if parts else np.zeros(0)
        r = np.nan_to_num(r, nan=0.0)
        # A bootstrap resample counts each segment as often as it was drawn.
        return r * np.sqrt(self.weights) if self.weights is not None else r

    def residual_segments(self, values: Mapping[str, float], segment_s: float) -> np.ndarray:
        """Each residual entry's segment: episodes cut into `segment_s` pieces, numbered across
        all episodes (what a block bootstrap draws, the misfit within a piece being correlated)."""
        times: list[np.ndarray] = []
        self.residual_of(self.rollouts([dict(values)], {})[0], times)
        et = np.concatenate(times) if times else np.zeros((0, 2))
        seg = np.floor(et[:, 1] / segment_s).astype(int)
        per = int(seg.max()) + 1 if len(seg) else 1
        return et[:, 0].astype(int) * per + seg

    def residuals(self, X: np.ndarray, fixed: Mapping[str, float]) -> np.ndarray:
        """n_residuals x k for the k columns of X (parameters in `names` order)."""
        X = np.asarray(X, float)
        X = X.reshape(len(self.names), X.shape[1] if X.ndim == 2 else 1)
        sets = [dict(zip(self.names, X[:, k])) for k in range(X.shape[1])]
        rows = self.rollouts(sets, fixed)
        return np.stack([self.residual_of(r) for r in rows], axis=1)

    def cost(self, values: Mapping[str, float]) -> float:
        """Half the sum of squared residuals at `values` (names left out at their nominal)."""
        column = np.array([[values.get(n, self.rt.parameters.info(n).nominal)] for n in self.names])
        return float(0.5 * np.sum(self.residuals(column.reshape(len(self.names), 1), values) ** 2))


# -- 1. the time offset ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Offset:
    seconds: float
    method: str  # "effort cross-correlation" or "velocity cross-correlation"
    score: float  # the normalised correlation at the peak


def _band(times: np.ndarray, x: np.ndarray, band_hz: tuple[float, float]) -> np.ndarray:
    from scipy.signal import butter, filtfilt
    fs = 1.0 / float(np.median(np.diff(times)))
    high = min(band_hz[1], 0.45 * fs)
    b, a = butter(4, [band_hz[0] / (fs / 2), high / (fs / 2)], btype="band")
    return filtfilt(b, a, x, axis=0)


def estimate_offset(evaluator: Evaluator, values: Mapping[str, float] | None = None,
                    search_s: tuple[float, float] = (-0.02, 0.1), band_hz: tuple[float, float] = (20.0, 110.0)) -> Offset:
    """The delay between the recorded commands and their effect on the joints, before any fit.

    A servo's effort follows its setpoint at once (kp times the tracking error), long before
    the arm's inertia lets it move: the fast content of the setpoint stream (a policy streams
    targets below the control rate, and the rate limiter turns each into a ripple) shows up in
    the measured efforts delayed by the latency. The arm's motion, by contrast, lags its
    setpoints by the servo's time constant too (kv / kp, a tenth of a second on a stiff arm),
    which depends on the very gains the fit is after. So the delay is the lag of the peak of
    the cross-correlation, in a band above the arm's own response (`band_hz`), between the
    measured efforts and the twin's (at `values`, latency 0), refined by a parabola through
    the peak; comparing with the twin's efforts rather than the setpoints themselves takes out
    the servo's own phase in that band. Without efforts, velocities take their place."""
    dt = evaluator.data[0].stream.timestep
    layout = evaluator.rt.layout
    use_effort = all(np.isfinite(fd.effort).all() for fd in evaluator.data)
    rows = evaluator.rollouts([{"latency_s": 0.0}], dict(values or {}))[0]
    lags = np.arange(search_s[0], search_s[1] + 1e-12, dt / 2)
    scores = np.zeros(len(lags))
    norms = np.zeros(len(lags))
    measured_energy = 0.0
    for fd, r in zip(evaluator.data, rows):
        t_pred = np.arange(len(r)) * dt
        twin = layout.effort(r) if use_effort else layout.velocity(r)[:, : layout.narm]
        keep = (fd.joint_times > fd.joint_times[0] + 0.05) & (fd.joint_times < fd.joint_times[-1] - 0.05)
        meas = _band(fd.joint_times, np.nan_to_num(fd.effort if use_effort else fd.velocity), band_hz)[keep]
        measured_energy += float(np.sum(meas ** 2))
        for i, lag in enumerate(lags):
            shifted = np.stack([np.interp(fd.joint_times - lag, t_pred, twin[:, k]) for k in range(twin.shape[1])],
                               axis=1)
            cf = _band(fd.joint_times, shifted, band_hz)[keep]
            scores[i] += float(np.sum(cf * meas))
            norms[i] += float(np.sum(cf * cf))
    corr = scores / np.sqrt(np.maximum(norms * measured_energy, 1e-300))
    best = int(np.argmax(corr))
    offset = float(lags[best])
    if 0 < best < len(lags) - 1:
        a, b, c = corr[best - 1], corr[best], corr[best + 1]
        denom = a - 2 * b + c
        if denom < 0:
            offset += 0.5 * (a - c) / denom * (lags[1] - lags[0])
    return Offset(offset, "effort cross-correlation" if use_effort else "velocity cross-correlation",
                  float(corr[best]))


# -- 3. CMA-ES on the trial runner's workers ---------------------------------------------------------------
@dataclass(frozen=True)
class _Candidates:
    """How a CMA-ES point maps to parameter values: `keys[i]` gets exp(x[i]) when `log[i]`,
    x[i] * unit[i] otherwise, over `base`; evaluated on the full episodes or the window."""

    base: tuple[tuple[str, float], ...]
    keys: tuple[str, ...]
    log: tuple[bool, ...]
    unit: tuple[float, ...]
    windowed: bool = False

    def values(self, x) -> dict[str, float]:
        out = dict(self.base)
        for k, lg, u, v in zip(self.keys, self.log, self.unit, x):
            out[k] = float(math.exp(v)) if lg else float(v) * u
        return out


@dataclass(eq=False)
class _FitState:
    """The evaluators candidates are costed on: the full episodes and their first seconds."""

    full: Evaluator
    window: Evaluator

    def close(self) -> None:
        self.window.close()
        self.full.close()


def _windowed(full: Evaluator, window_s: float | None, threads: int) -> Evaluator:
    """The global search's evaluator: the first `window_s` of the episodes (None: all of them)."""
    data = [window(fd, window_s) for fd in full.data] if window_s else full.data
    return Evaluator(full.rt, data, [], threads, full.use)


@dataclass(frozen=True, eq=False)
class _FitJob:
    """A fit as a worker rebuilds it (a JobContext for TrialPool.map): the episodes from their
    files, the twin compiled from the scene; `key` is the fit's own, so a worker builds it once."""

    key: str
    scene: object
    episode_paths: tuple[str, ...]
    tracks: tuple
    names: tuple[str, ...]
    use: tuple[str, ...]
    markers: object
    window_s: float | None

    def build(self) -> _FitState:
        from r2s2r.data.episode import load_episode
        full = _evaluator_for(self.scene, [load_episode(p) for p in self.episode_paths], self.tracks, self.names,
                              self.use, 1, self.markers)
        return _FitState(full, _windowed(full, self.window_s, 1))


def _candidate_cost(state: _FitState, job: tuple[_Candidates, list]) -> float:
    candidates, x = job
    return (state.window if candidates.windowed else state.full).cost(candidates.values(x))


def _evaluator_for(scene, episodes, track_data, names, use, threads, markers=None) -> Evaluator:
    spec = None
    if markers:
        from r2s2r.real2sim.markers import add_markers
        from r2s2r.sim.twin import build_scene_spec
        spec = build_scene_spec(scene)
        add_markers(spec, markers)
    rt = ReplayTwin(scene, spec=spec)
    data = [prepare(rt, ep, tracks) for ep, tracks in zip(episodes, track_data)]
    return Evaluator(rt, data, names, threads, use)


def cma_search(costs_of, x0: Sequence[float], sigma0: float, bounds: tuple[Sequence[float], Sequence[float]],
               iterations: int = 8, popsize: int = 6, seed: int = 1, stds: Sequence[float] | None = None):
    """Minimise with CMA-ES; `costs_of(xs)` gives the costs of a generation's points, in their
    order (on workers, or here). One-dimensional problems (cma needs two) carry a dummy second
    coordinate."""
    import cma
    x0 = list(map(float, x0))
    lower, upper = list(map(float, bounds[0])), list(map(float, bounds[1]))
    pad = len(x0) == 1
    if pad:
        x0, lower, upper = x0 + [0.0], lower + [-1.0], upper + [1.0]
    options = {"bounds": [lower, upper], "popsize": popsize, "seed": seed, "verbose": -9, "maxiter": iterations}
    if stds is not None:
        options["CMA_stds"] = list(stds) + ([1.0] if pad else [])
    es = cma.CMAEvolutionStrategy(x0, sigma0, options)
    history = []
    while not es.stop():
        points = es.ask()
        costs = [float(c) for c in costs_of([list(c[:1]) if pad else list(c) for c in points])]
        es.tell(points, costs)
        history.append(min(costs))
    best = es.result.xbest
    return (list(best[:1]) if pad else list(best)), float(es.result.fbest), history


@dataclass(frozen=True)
class _Start:
    """Where one start of the fit ended."""

    values: dict
    latency_s: float
    cost: float


# -- the whole fit ----------------------------------------------------------------------------------------------
@dataclass
class FittedParameter:
    name: str
    nominal: float
    value: float
    interval: float  # 95 % half-width; inf: not constrained by the data
    lower: float
    upper: float
    unit: str
    identifiable: bool
    why: str = ""
    fitted: bool = True  # False: held at its prior, only checked for identifiability (fit's `check`)
    interval_curvature: float = float("nan")  # the Jacobian's 95 % half-width
    interval_bootstrap: float = float("nan")  # the block bootstrap's (0: none run)
    spread: tuple[float, ...] = ()  # (lowest, highest) over the starts that fit as well as the best


@dataclass
class FitResult:
    offset_s: float  # the command-to-state offset found and removed before least squares
    xcorr_offset_s: float  # the model-free first estimate (effort cross-correlation)
    latency_s: float  # the offset after the final CMA-ES refinement
    latency_ci: float  # its 95 % half-width
    parameters: list[FittedParameter]
    cost_nominal: float
    cost_fitted: float
    iterations: int
    evaluations: int
    wall_s: float
    workers: int
    history: list[float] = field(default_factory=list)
    fixed: dict = field(default_factory=dict)  # values held during the fit
    starts: list[dict] = field(default_factory=list)  # where each start ended: values, latency_s, cost
    agreeing_starts: int = 1  # how many ended as well as the best (within a 95 % interval's rise)
    bootstrap_segments: int = 0  # segments the block bootstrap resampled (0: none)
    latency_note: str = ""  # what widened the latency's interval, if anything
    adequacy: str = ""  # a warning when the misfit says the twin's model cannot follow the cell

    @property
    def values(self) -> dict[str, float]:
        """Every value the twin should take: the fitted ones, the latency and those held."""
        return {**self.fixed, **{p.name: p.value for p in self.parameters if p.fitted}, "latency_s": self.latency_s}

    def report(self) -> dict:
        return {"offset_s": self.offset_s, "xcorr_offset_s": self.xcorr_offset_s, "latency_s": self.latency_s,
                "latency_ci95": self.latency_ci, "cost_nominal": self.cost_nominal,
                "cost_fitted": self.cost_fitted, "iterations": self.iterations, "evaluations": self.evaluations,
                "wall_s": self.wall_s, "workers": self.workers, "latency_note": self.latency_note,
                "adequacy": self.adequacy,
                "starts": self.starts, "agreeing_starts": self.agreeing_starts,
                "bootstrap_segments": self.bootstrap_segments,
                "parameters": [{"name": p.name, "nominal": p.nominal, "value": p.value, "ci95": p.interval,
                                "ci95_curvature": p.interval_curvature, "ci95_bootstrap": p.interval_bootstrap,
                                "spread": list(p.spread), "bounds": [p.lower, p.upper], "unit": p.unit,
                                "identifiable": p.identifiable, "why": p.why, "fitted": p.fitted}
                               for p in self.parameters]}


def _bounds(rt: ReplayTwin, name: str, bounds: Mapping[str, tuple[float, float]] | None) -> tuple[float, float]:
    if bounds and name in bounds:
        return bounds[name]
    info = rt.parameters.info(name)
    return info.lower, info.upper


def _scale(rt: ReplayTwin, name: str) -> float:
    """The unit the optimiser counts a parameter in, so that all of them move by O(1): latency
    in milliseconds, a mass in units of its prior, everything else as it is."""
    info = rt.parameters.info(name)
    if info.kind == "latency_s":
        return 1e-3
    if info.kind == "mass":
        return max(info.nominal, 0.01)
    return 1.0


def _sysid_params(rt: ReplayTwin, names: Sequence[str], start: Mapping[str, float], bounds=None):
    """mujoco.sysid Parameters in the optimiser's units (see _scale)."""
    from mujoco import sysid
    params = sysid.ParameterDict()
    for n in names:
        lo, hi = _bounds(rt, n, bounds)
        k = _scale(rt, n)
        value = float(np.clip(start.get(n, rt.parameters.info(n).nominal), lo, hi))
        # Off the bounds a little: a start on a bound can stall the optimiser there.
        value = float(np.clip(value, lo + 1e-3 * (hi - lo), hi - 1e-3 * (hi - lo)))
        params.add(sysid.Parameter(n, value / k, lo / k, hi / k))
    return params


def _least_squares(evaluator: Evaluator, names, start, fixed, max_iters: int, bounds=None):
    from mujoco import sysid
    params = _sysid_params(evaluator.rt, names, start, bounds)
    scale = np.array([_scale(evaluator.rt, n) for n in names])[:, None]

    def residual_fn(z, _params):
        return [evaluator.residuals(np.asarray(z).reshape(len(names), -1) * scale, fixed)], None, None

    evaluator.names = list(names)
    # mu grows 3x on a rejected step, not 1.26x: against a bound, where no step helps, the default
    # spent a hundred rollouts before giving up. The per-iteration log goes nowhere (it ignores
    # verbose=False).
    fitted, result = sysid.optimize(params, residual_fn, optimizer="mujoco", verbose=False, max_iters=max_iters,
                                    eps=1e-4, mu_factor=10 ** 0.5, output=io.StringIO())
    x = fitted.as_vector() * scale[:, 0]
    return dict(zip(names, map(float, x))), result


def _intervals(evaluator: Evaluator, names, values, fixed, bounds=None):
    """95 % half-widths and the correlation matrix at `values`, from a finite-difference Jacobian
    (in the optimiser's units, converted back)."""
    from mujoco import minimize, sysid
    scale = np.array([_scale(evaluator.rt, n) for n in names])
    z = np.array([values[n] for n in names]) / scale
    lower = np.array([_bounds(evaluator.rt, n, bounds)[0] for n in names]) / scale
    upper = np.array([_bounds(evaluator.rt, n, bounds)[1] for n in names]) / scale

    def res(Z):
        return evaluator.residuals(Z * scale[:, None], fixed)
    evaluator.names = list(names)
    r0 = res(z[:, None])
    J, _ = minimize.jacobian_fd(res, z[:, None], r0, 1e-4, 0, [lower[:, None], upper[:, None]])
    sigma, half = sysid.calculate_intervals([r0[:, 0]], J)
    d = np.sqrt(np.clip(np.diag(sigma), 1e-300, None))
    corr = sigma / np.outer(d, d)
    return np.asarray(half, float) * scale, corr, r0.shape[0], (J, r0[:, 0], scale)


def _bootstrap(J: np.ndarray, r: np.ndarray, segments: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """95 % half-widths (in J's columns' units) from a block bootstrap, linearised at the optimum.

    The episodes are cut into segments; each resample draws as many segments with replacement
    (one drawn twice counts twice) and takes the Gauss-Newton step that refits the parameters
    to it from the optimum, with the Jacobian there. Unlike the curvature's interval this sees a
    misfit correlated in time (a model that cannot follow the cell, rather than white noise): a
    fit that leans on a few segments moves when they are drawn differently. Linearised, a
    resample costs a solve, not a fit: the multi-start covers what is not linear."""
    _, segments = np.unique(segments, return_inverse=True)
    count = int(segments.max()) + 1
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(resamples):
        w = np.bincount(rng.integers(0, count, count), minlength=count)[segments].astype(float)
        JW = J * w[:, None]
        steps.append(np.linalg.lstsq(JW.T @ J, -(JW.T @ r), rcond=None)[0])
    return 1.96 * np.std(np.array(steps), axis=0, ddof=1)


def _cost_rise(evaluator: Evaluator, name: str, values: Mapping[str, float], fixed: Mapping[str, float],
               cost: float, step: float) -> float:
    """The least the cost rises when `name` alone moves `step` either way (within its bounds)
    from `values`, the others held: what the data says about it, whatever the curvature says."""
    lower, upper = _bounds(evaluator.rt, name, None)
    rises = []
    for moved in (max(lower, values[name] - step), min(upper, values[name] + step)):
        if moved != values[name]:
            rises.append(evaluator.cost({**fixed, **values, name: moved}) - cost)
    return min(rises) if rises else float("inf")


def _search_space(rt: ReplayTwin, names: Sequence[str]):
    """CMA-ES coordinates of parameters: scales and masses in log space, the rest in the
    optimiser's units. Returns (log flags, units, x0, lower, upper)."""
    logs, units, x0, lower, upper = [], [], [], [], []
    for n in names:
        info = rt.parameters.info(n)
        lg = info.kind.endswith("_scale") or info.kind == "mass"
        u = 1.0 if lg else _scale(rt, n)
        logs.append(lg)
        units.append(u)
        if lg:
            x0.append(math.log(info.nominal))
            lower.append(math.log(max(info.lower, 1e-3 * info.nominal)))
            upper.append(math.log(info.upper))
        else:
            x0.append(info.nominal / u)
            lower.append(info.lower / u)
            upper.append(info.upper / u)
    return logs, units, x0, lower, upper


def fit(scene, episodes: Sequence[Episode], names: Sequence[str], tracks: Sequence[Sequence[ObjectTrack]] | None = None,
        fixed: Mapping[str, float] | None = None, workers: int = 1, max_iters: int = 10, markers=None,
        use: Sequence[str] = ("position", "velocity", "effort", "finger", "object"),
        episode_paths: Sequence[str] | None = None, window_s: float | None = 1.5, latency_max_s: float = 0.06,
        global_iterations: int = 20, check: Sequence[str] = (), backend: str = "process",
        address: str | None = None, starts: int = 3, bootstrap: int = 200, segment_s: float = 0.25,
        seed: int = 0) -> FitResult:
    """Fit `names` (real2sim.params names) to the episodes, with `fixed` values held (a
    previous fit's). The latency is estimated too unless `fixed` holds it.

    `window_s`: the global search looks at the episodes' first seconds only (None: all of
    them; what happens late in an episode, a grasp, an object's slip, needs all of it);
    0 `global_iterations`: least squares from the priors, no global search.
    `check`: parameters held at their priors but tested for identifiability at the optimum
    (link inertias, armature): the report lists them, flagged when the data cannot pin them
    down (fitting them anyway lands, confidently, wherever the start was)
    `workers` > 1 runs CMA-ES generations on that many of the trial runner's workers (a
    TrialPool on `backend`, "process" or "ray" at `address`; they load the episodes from
    `episode_paths`, without which generations run here) and rollouts here on that many
    threads. Any number of workers gives the same fit, bit for bit.
    `starts`: least squares runs from CMA-ES's best, the priors and the rest drawn across the
    box with `seed` (with no global search, from the priors alone). `bootstrap` resamples of
    `segment_s` segments check the intervals (fewer than 2: no check)."""
    if backend == "ray" and episode_paths is None:
        raise ValueError("backend 'ray' needs episode_paths: its workers load the episodes from them")
    wall0 = time.perf_counter()
    fixed = dict(fixed or {})
    names = [n for n in names if n != "latency_s" and n not in fixed]
    estimate_latency = "latency_s" not in fixed
    tracks = list(tracks) if tracks is not None else [() for _ in episodes]
    evaluator = _evaluator_for(scene, episodes, tracks, names, use, workers, markers)
    rt = evaluator.rt
    nominal = {**rt.parameters.nominal(names), **fixed}
    here = _FitState(evaluator, _windowed(evaluator, window_s, workers))
    win = here.window
    pool = job = None
    if episode_paths is not None and (workers > 1 or backend == "ray"):
        pool = TrialPool(workers, backend, address)  # started by the first generation, if any
        job = _FitJob(uuid.uuid4().hex, scene, tuple(map(str, episode_paths)), tuple(map(tuple, tracks)),
                      tuple(names), tuple(use), markers, window_s)

    def costs(cand: _Candidates):
        """A generation's costs in candidate order (CMA-ES pairs them with its points)."""
        if pool is None:
            return lambda xs: [_candidate_cost(here, (cand, x)) for x in xs]
        return lambda xs: pool.map(_candidate_cost, [(cand, x) for x in xs], context=job)

    history: list[float] = []
    try:
        cost_nominal = evaluator.cost({**nominal, "latency_s": fixed.get("latency_s", 0.0)})
        found = estimate_offset(evaluator, nominal) if estimate_latency else None
        # 1. The offset, with the model parameters that go with it: CMA-ES over all of them and the
        #    latency. From the spec's values, least squares lands in a valley where too little
        #    damping makes up for too much delay, or the reverse.
        logs, units, x0, lower, upper = _search_space(rt, names)
        keys = list(names)
        if estimate_latency:
            keys.append("latency_s")
            logs.append(False)
            units.append(1e-3)
            x0.append(float(np.clip(found.seconds, 0.0, latency_max_s)) * 1e3)
            lower.append(0.0)
            upper.append(latency_max_s * 1e3)
        cand = _Candidates(tuple(nominal.items()), tuple(keys), tuple(logs), tuple(units), windowed=True)
        span = np.array(upper) - np.array(lower)  # CMA-ES steps in each coordinate by a share of its range
        base = {k: v for k, v in fixed.items() if k != "latency_s"}
        pooled = 0  # rollouts the workers ran
        free = names + (["latency_s"] if estimate_latency else [])
        held = {**base, "latency_s": fixed["latency_s"]} if not estimate_latency else dict(base)

        def descend(start: dict[str, float]) -> _Start:
            """Least squares on the model parameters and the latency together, from `start`: the
            setpoints are interpolated between physics steps, so the cost is smooth in the
            latency too, and fitting it alone, the model held, left kp to make up for the rest."""
            values, _ = _least_squares(evaluator, free, start, held, max_iters)
            latency = values.pop("latency_s", fixed.get("latency_s", 0.0))
            return _Start(values, latency, evaluator.cost({**base, **values, "latency_s": latency}))

        # 2. Least squares from several starts: CMA-ES's best, the priors (with the offset's
        #    estimate) and points drawn across the box. One start can end in a valley; the best of
        #    several rarely does, and where starts that end as well disagree, the data cannot tell
        #    their values apart.
        if global_iterations > 0:
            best, _, hist = cma_search(costs(cand), x0, 0.15 * float(span.max()), (lower, upper),
                                       iterations=global_iterations, popsize=10, stds=list(span / span.max()))
            history.extend(hist)
            pooled += 10 * len(hist) if pool is not None else 0
            rng = np.random.default_rng(seed)
            points = [best, x0][:max(starts, 1)]
            points += [list(map(float, rng.uniform(lower, upper))) for _ in range(starts - len(points))]
        else:  # no global search: least squares from the priors (a smooth problem, a good start; from
            # afar, contacts make the residual too rough for it)
            points = [x0]
        runs = [descend(cand.values(x)) for x in points]
        chosen = min(runs, key=lambda r: r.cost)
        values, latency = dict(chosen.values), chosen.latency_s
        offset = cand.values(points[0]).get("latency_s", latency)  # the global stage's latency
        fit_names = names + (["latency_s"] if estimate_latency else [])
        evaluator.names = fit_names
        all_values = {**values, "latency_s": latency}
        cost_fitted = evaluator.cost({**base, **all_values})
        # The intervals at the latency found or held (a held latency is in neither names nor base).
        half, corr, count, (J, r0, units) = _intervals(evaluator, fit_names, all_values, {**base, "latency_s": latency})
        # The cost's 95 % rise (chi-square, 1 degree of freedom, on the residuals' own variance):
        # what a parameter moved to the edge of its 95 % interval adds.
        needed = 0.5 * 3.84 * (2.0 * cost_fitted / max(count - len(fit_names), 1))
        # Is the curvature's interval honest? A block bootstrap refits on resampled segments, and
        # starts that ended as well as the best (within that rise) show what else the data allows.
        # The interval reported is the widest of the three.
        curvature = np.asarray(half, float)
        resampled, segments = np.zeros(len(fit_names)), 0
        if bootstrap >= 2:
            ids = evaluator.residual_segments({**base, **all_values}, segment_s)
            segments = len(np.unique(ids))
            resampled = _bootstrap(J, r0, ids, bootstrap, seed) * units
        agree = [r for r in runs if r.cost <= cost_fitted + max(needed, 1e-9 * (1.0 + cost_fitted))]
        ends = np.array([[{**r.values, "latency_s": r.latency_s}[n] for n in fit_names] for r in agree])
        spread = np.stack([ends.min(axis=0), ends.max(axis=0)], axis=1)
        reached = np.max(np.abs(ends - np.array([all_values[n] for n in fit_names])), axis=0)
        half = np.maximum(np.maximum(curvature, resampled), reached)

        # A misfit correlated in time means the twin cannot follow the cell (play, quantisation,
        # compliance it has no parameter for): its values are then its best approximation, which
        # can differ from the cell's own by more than any interval says.
        ratio = float(np.median(resampled / np.maximum(curvature, 1e-300))) if segments else 0.0
        adequacy = ""
        if ratio > ADEQUATE_RATIO:
            adequacy = (f"the misfit is correlated in time (the bootstrap's intervals are {ratio:.1f} times the "
                        f"curvature's): the twin's model cannot follow this cell, and its values are its best "
                        f"approximation, which may differ from the cell's own by more than their intervals")

        def honesty(i: int) -> str:
            """What widened the curvature's interval, if anything."""
            notes = []
            if resampled[i] > 1.5 * curvature[i]:  # within that, the two agree as far as 200 resamples tell
                notes.append(f"the curvature's +-{curvature[i]:.3g} does not survive a bootstrap over {segments} "
                             f"segments (+-{resampled[i]:.3g})")
            if reached[i] > max(curvature[i], resampled[i]):
                notes.append(f"{len(agree)} of {len(runs)} starts fit as well between {spread[i, 0]:.4g} and "
                             f"{spread[i, 1]:.4g}")
            return "; ".join(notes)

        out = []
        for i, n in enumerate(names):
            info = rt.parameters.info(n)
            value = values[n]
            reach = IDENTIFIABLE_REL * max(abs(value), 1e-3 if info.unit == "N m" else 1e-2)
            why = ""
            if not np.isfinite(half[i]):
                why = "the data does not constrain it (infinite interval)"
            elif half[i] > reach:
                why = f"95% interval +-{half[i]:.3g} is wider than {IDENTIFIABLE_REL:.0%} of its value"
            else:
                # The curvature can lie (a contact makes the residual step): the cost must also rise
                # measurably when the parameter really moves that far, or it was left at its prior.
                rise = _cost_rise(evaluator, n, all_values, {**base, "latency_s": latency}, cost_fitted, reach)
                if not rise > max(needed, 1e-9 * (1.0 + cost_fitted)):
                    why = (f"moving it {IDENTIFIABLE_REL:.0%} either way raises the cost by {rise:.3g}, under the "
                           f"{needed:.3g} of a 95% interval: the data hardly depends on it (the curvature's "
                           f"+-{curvature[i]:.3g} does not hold)")
            identifiable = not why
            partners = [fit_names[k] for k in range(len(fit_names)) if k != i and abs(corr[i, k]) > CORRELATED]
            if partners:  # still pinned down, but only jointly: an error in one shows up in the other
                why = (why + "; " if why else "") + "correlated with " + ", ".join(partners)
            widened = honesty(i)
            if widened:
                why = (why + "; " if why else "") + widened
            out.append(FittedParameter(n, info.nominal, value, float(half[i]), info.lower, info.upper, info.unit,
                                       identifiable, why, interval_curvature=float(curvature[i]),
                                       interval_bootstrap=float(resampled[i]),
                                       spread=(float(spread[i, 0]), float(spread[i, 1]))))
        check = [c for c in check if c not in fit_names and c not in base]
        if check:
            # Intervals with the checked parameters free too: a parameter the data cannot tell from
            # the fitted ones (armature next to link inertia) gets an infinite or wide one.
            at = {**all_values, **rt.parameters.nominal(check)}
            evaluator.names = fit_names + check
            half_c, corr_c, _, _ = _intervals(evaluator, fit_names + check, at, {**base, "latency_s": latency})
            for i, n in enumerate(check, start=len(fit_names)):
                info = rt.parameters.info(n)
                why = "held at its prior, not fitted"
                ok = bool(np.isfinite(half_c[i]) and half_c[i] <= IDENTIFIABLE_REL * max(abs(info.nominal), 1e-2))
                if not np.isfinite(half_c[i]):
                    why += "; the data does not constrain it (infinite interval)"
                elif not ok:
                    why += f"; 95% interval +-{half_c[i]:.3g} is wider than {IDENTIFIABLE_REL:.0%} of its value"
                partners = [(fit_names + check)[k] for k in range(len(fit_names) + len(check))
                            if k != i and abs(corr_c[i, k]) > CORRELATED]
                if partners:
                    ok = False
                    why += "; indistinguishable from " + ", ".join(partners)
                out.append(FittedParameter(n, info.nominal, info.nominal, float(half_c[i]), info.lower, info.upper,
                                           info.unit, ok, why, fitted=False))
        return FitResult(offset, found.seconds if found else float("nan"), latency,
                         float(half[-1]) if estimate_latency else 0.0, out, cost_nominal, cost_fitted, max_iters,
                         evaluator.evaluations + win.evaluations + pooled, time.perf_counter() - wall0, workers, history,
                         fixed=base, starts=[{"values": r.values, "latency_s": r.latency_s, "cost": r.cost}
                                             for r in runs],
                         agreeing_starts=len(agree), bootstrap_segments=segments, adequacy=adequacy,
                         latency_note=honesty(len(fit_names) - 1) if estimate_latency else "")
    finally:
        if pool is not None:
            pool.close()
        here.close()


ARM_FITTED = ("kp_scale", "kv_scale", "damping_scale", "frictionloss")  # per group, from joint data
ARM_CHECKED = ("armature_scale", "inertia_scale")  # checked for identifiability, not fitted


def fit_arm(scene, episode: Episode, episode_path: str, workers: int = 1, backend: str = "process",
            address: str | None = None, markers=None, seed: int = 0) -> FitResult:
    """The arm's servo gains, damping, friction loss and the latency, fitted on one episode of
    free motion (an excitation, or a task episode's): what `r2s2r align --fit` and
    `r2s2r fidelity` identify the arm with."""
    groups = episode.robot.group_names
    return fit(scene, [episode], [f"{g}.{k}" for g in groups for k in ARM_FITTED], workers=workers,
               backend=backend, address=address, episode_paths=[episode_path], use=("position", "velocity", "effort"),
               markers=markers or None, check=[f"{g}.{k}" for g in groups for k in ARM_CHECKED], seed=seed)


def write_fitted(out_dir, scene, fit_values: Mapping[str, float], parameters) -> tuple[Path, Path]:
    """fitted_scene.yaml and robot_dynamics.yaml in `out_dir`: what a fit found, for the twin to
    load (`parameters`: the TwinParameters the values name)."""
    from r2s2r.real2sim.params import OBJECT_PRIORITY
    from r2s2r.real2sim.reconstruct import write_scene
    from r2s2r.sim.dynamics import load_dynamics
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    objects = [replace(o, mass=float(fit_values.get(f"{o.name}.mass", o.mass)),
                       friction=float(fit_values.get(f"{o.name}.friction", o.friction))) for o in scene.objects]
    # The objects' friction was fitted with their geoms above the finger pads (params.prepare):
    # the twin that loads it must resolve contacts the same way.
    dyn = {"robot": scene.robot, "command_latency_s": float(fit_values.get("latency_s", 0.0)),
           "object_priority": OBJECT_PRIORITY, "joints": parameters.joint_values(fit_values),
           "fitted": {k: float(v) for k, v in fit_values.items()}}
    dyn_path = out_dir / "robot_dynamics.yaml"
    dyn_path.write_text("# Fitted by r2s2r's system identification (real2sim.sysid): per-joint actuator gains\n"
                        "# and passive dynamics, and the command latency; fitted_scene.yaml names this file, so\n"
                        "# its twins apply it (sim.dynamics).\n" + yaml.safe_dump(dyn, sort_keys=False))
    fitted = replace(scene.with_objects(objects), dynamics=load_dynamics(dyn_path, parameters.robot))
    scene_path = write_scene(fitted, out_dir / "fitted_scene.yaml",
                             f"# Fitted by r2s2r's system identification; robot dynamics and latency: {dyn_path.name}")
    return scene_path, dyn_path


__all__ = ["fit", "fit_arm", "write_fitted", "ARM_FITTED", "FitResult", "FittedParameter", "ObjectTrack", "estimate_offset", "Evaluator", "prepare",
           "cma_search", "SIGMA"]
