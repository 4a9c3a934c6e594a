"""Does the twin's verdict transfer? A fidelity study of one proxy-real cell (`r2s2r fidelity`).

The claim under test is not that the twin's success rates equal the cell's, but that the twin
reaches the same judgement: which policies are better, where they fail, and whether the
trials that barely made it (or barely failed) in the cell do the same in the twin. The study:

1. records an excitation episode in the cell through the live ROS graph (nodes/record_cell.py:
   driver_node on the proxy backend, recorder_node, and the excitation's commands published
   over DDS), the bag a real cell gives;
2. fits the arm (`sysid.fit_arm`: gains, damping, friction loss, latency) on that bag alone and
   writes the fitted twin (`twin/fitted_scene.yaml`, the task's scene with the fitted dynamics);
3. draws the initial conditions once: `sim_trials` points of the task's perturbation space,
   over its initial-condition factors only (where the objects, the fixtures and the arm start;
   a cell's physics is its own, never drawn), trial i from (seed, i);
4. runs every policy on all of them in the fitted twin and in the nominal twin (in-process, on
   the trial runner's workers), and on the first `real_trials` of them in the cell through the
   live ROS graph (driver_node on the proxy backend, policy_node, over DDS, paced at
   `real_time_factor`), as a real cell is run: the cell's trial i and the twins' trial i start
   from the same state;
5. compares: success rates with Wilson intervals on every side; Pearson, Spearman and MMRV of
   each twin's rates against the cell's (eval.stats); per policy, the failure stages on each side
   and their total variation distance; per trial, whether the twin gave the cell's outcome from
   the same start; and near-misses: the cell's trials whose margin was within `near_miss` of
   zero, with the outcome class and margin the twin gave from the same initial state.

Every figure is computed for the fitted twin and the nominal one side by side: what alignment
buys. Everything is kept under the study's folder and skipped when present (the bag, the fit,
each trial in `trials.sqlite` and `cell.sqlite`), so a killed study resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from r2s2r.config import ConfigError
from r2s2r.eval.runner import Planned, TrialPool, TrialResult, TrialSpec, check_policy, progress_bar, run_trials, \
    sample_perturbations, trial_seed
from r2s2r.eval.stats import agreement, stage_distance, wilson
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task, task_in_scene
from r2s2r.real2sim.proxy_cell import ProxyCellConfig, load_cell

# Where a trial starts: the objects, the fixtures, the arm. A cell's physics (masses, friction,
# gains, latency) and its cameras are its own, so those factors are never drawn.
INITIAL_CONDITION_KINDS = ("object_x", "object_y", "object_yaw", "fixture_x", "fixture_y", "joint_offset")
SIDES = ("fitted", "nominal")
GRAPH_CHUNK = 5  # cell trials per graph run: each chunk is stored as it ends
GRAPH_TRIAL_TIMEOUT_S = 180.0  # wall seconds a cell trial may take at real time, start-up included


@dataclass(frozen=True)
class FidelityConfig:
    cell: str  # a proxy cell file, or the name of a shipped one
    task: str
    policies: tuple[str, ...]  # policy URIs or policy config YAMLs
    sim_trials: int = 2000
    real_trials: int = 100
    seed: int = 0
    envelope: str | None = None
    factors: tuple[str, ...] | None = None  # default: the space's initial-condition factors
    near_miss: float = 0.01  # |margin| at most this: a near-miss (the task's margin unit)
    real_time_factor: float = 1.0
    excitation_s: float = 3.0

    def check(self) -> None:
        if len(self.policies) < 2:
            raise ConfigError("command line", "--policies", "at least two policies to rank", list(self.policies))
        if len(set(self.policies)) != len(self.policies):
            raise ConfigError("command line", "--policies", "each policy once", list(self.policies))
        if self.real_trials < 1 or self.sim_trials < self.real_trials:
            raise ConfigError("command line", "--sim-trials / --real-trials",
                              "at least one cell trial, and at least as many twin trials (the cell's trial i "
                              "starts where the twins' trial i does)", f"{self.sim_trials} / {self.real_trials}")
        if not (self.near_miss > 0 and math.isfinite(self.near_miss)):
            raise ConfigError("command line", "--near-miss", "a positive margin", self.near_miss)
        if not self.real_time_factor > 0:
            raise ConfigError("command line", "--real-time-factor", "a positive factor of the wall clock (a real "
                              "cell runs at 1)", self.real_time_factor)
        if not self.excitation_s >= 1.0:
            raise ConfigError("command line", "--excitation-s", "at least 1 s of excitation", self.excitation_s)


def policy_label(policy: str) -> str:
    """A policy as the report names it: a config file by its stem, a checkpoint by its run, folder
    and step (RUN/checkpoints/step_N), a URI as it is."""
    if policy.endswith((".yaml", ".yml")):
        return Path(policy).stem
    return "/".join(Path(policy).parts[-3:]) if ":" not in policy and Path(policy).exists() else policy


@dataclass
class Study:
    """What a study measured (the JSON report's content)."""

    config: dict
    cell: str
    task: str
    factors: list[str]
    labels: dict[str, str]  # policy -> label
    fit: dict
    rates: dict[str, dict[str, dict]] = field(default_factory=dict)  # side -> label -> Wilson rate
    stages: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # side -> label -> stage counts
    agreement: dict[str, dict] = field(default_factory=dict)  # twin side -> Pearson, Spearman, MMRV
    stage_distance: dict[str, dict[str, float]] = field(default_factory=dict)  # twin side -> label -> TV
    paired: dict[str, dict] = field(default_factory=dict)  # twin side -> same outcome from the same start
    near_misses: dict = field(default_factory=dict)
    wall_s: dict[str, float] = field(default_factory=dict)


def _check_task(cell: ProxyCellConfig, task) -> None:
    if cell.task is not None and cell.task != task.name:
        raise ConfigError(cell.source, "task", f"the study's task {task.name} (this cell is the scene of another)",
                          cell.task)
    if cell.scene.robot != task.robot:
        raise ConfigError(cell.source, "scene", f"a {task.robot} cell, the robot of task {task.name}",
                          cell.scene.robot)


def initial_condition_factors(space) -> list[str]:
    return [f.name for f in space.factors if f.kind in INITIAL_CONDITION_KINDS]


def record_through_graph(cell: ProxyCellConfig, script, path: Path, real_time_factor: float = 1.0,
                         timeout_s: float = 600.0) -> None:
    """Play `script` (real2sim.proxy.ScriptCommand) on the cell and record it into `path`, through
    driver_node, recorder_node and a player over DDS (nodes/record_cell.py, in a child process:
    this layer never imports rclpy). A killed recording is never taken for a bag: it is written
    beside `path` and moved there once closed."""
    from r2s2r.eval.graph import run_node_process
    partial = path.with_name(path.stem + ".partial.mcap")
    script_path = path.with_name(path.stem + ".script.json")
    script_path.write_text(json.dumps([asdict(c) for c in script]))
    run_node_process("r2s2r.nodes.record_cell", [cell.source, str(script_path), str(partial), "--real-time-factor",
                                                 str(real_time_factor)], timeout_s, f"recording in cell {cell.name}",
                     partial)
    partial.replace(path)
    script_path.unlink()


def _record_excitation(cell: ProxyCellConfig, path: Path, seconds: float, seed: int, real_time_factor: float) -> None:
    from r2s2r.real2sim.proxy import excitation_script
    from r2s2r.robots import get_robot
    # At the cell's own pace at most: faster, DDS's wall-clock milliseconds would stretch into
    # the cell's time, and the commands' log times with them.
    pace = min(real_time_factor, 1.0)
    record_through_graph(cell, excitation_script(get_robot(cell.scene.robot), seconds, seed=seed), path,
                         pace, timeout_s=120.0 + 10.0 * seconds / pace)


def _fit(task, bag: Path, twin_dir: Path, workers: int, log: Callable[[str], None]) -> dict:
    """The fitted twin in twin_dir (fitted_scene.yaml, robot_dynamics.yaml, fit.json), from the bag."""
    report_path = twin_dir / "fit.json"
    if report_path.is_file() and (twin_dir / "fitted_scene.yaml").is_file():
        return json.loads(report_path.read_text())
    from r2s2r.data.episode import load_episode
    from r2s2r.real2sim.params import TwinParameters
    from r2s2r.real2sim.sysid import fit_arm, write_fitted
    from r2s2r.sim.twin import Twin
    episode = load_episode(bag)
    result = fit_arm(task.base_scene, episode, str(bag), workers=workers)
    twin = Twin(task.base_scene)
    write_fitted(twin_dir, task.base_scene, result.values, TwinParameters(twin.model, twin.robot,
                                                                          task.base_scene.objects))
    if result.adequacy:
        log(f"warning: {result.adequacy}")
    report = result.report()
    report_path.write_text(json.dumps(report, indent=1))
    return report


def _summary(results: Sequence[TrialResult]) -> tuple[dict, dict[str, int]]:
    rate = wilson(sum(r.success for r in results), len(results))
    stages: dict[str, int] = {}
    for r in results:
        stages[r.stage] = stages.get(r.stage, 0) + 1
    return {"successes": rate.successes, "trials": rate.trials, "rate": rate.rate, "ci95": [rate.low, rate.high]}, \
        dict(sorted(stages.items()))


def compare(study: Study, cell_results: Mapping[str, Sequence[TrialResult]],
            twin_results: Mapping[str, Mapping[str, Sequence[TrialResult]]], near_miss: float) -> None:
    """Fill `study`'s figures from the cell's trials (label -> results, trial i first) and each
    twin side's (side -> label -> results in plan order, so the twins' trial i starts where the
    cell's trial i did)."""
    labels = list(cell_results)
    for side, per_label in [("cell", cell_results)] + [(s, twin_results[s]) for s in SIDES]:
        study.rates[side], study.stages[side] = {}, {}
        for label in labels:
            study.rates[side][label], study.stages[side][label] = _summary(per_label[label])
    cell_rates = {k: v["rate"] for k, v in study.rates["cell"].items()}
    near = [(label, i, r) for label in labels for i, r in enumerate(cell_results[label]) if abs(r.margin) <= near_miss]
    study.near_misses = {"threshold": near_miss, "count": len(near), "trials": []}
    for side in SIDES:
        study.agreement[side] = agreement({k: v["rate"] for k, v in study.rates[side].items()}, cell_rates)
        study.stage_distance[side] = {label: stage_distance(study.stages[side][label], study.stages["cell"][label])
                                      for label in labels}
        pooled_twin: dict[str, int] = {}
        pooled_cell: dict[str, int] = {}
        for label in labels:
            for pooled, counts in ((pooled_twin, study.stages[side][label]), (pooled_cell, study.stages["cell"][label])):
                for stage, n in counts.items():
                    pooled[stage] = pooled.get(stage, 0) + n
        study.stage_distance[side]["all policies"] = stage_distance(pooled_twin, pooled_cell)
        same = total = 0
        for label in labels:
            for i, r in enumerate(cell_results[label]):
                twin = twin_results[side][label][i]
                total += 1
                same += (twin.success, twin.stage) == (r.success, r.stage)
        study.paired[side] = {"same_outcome": same, "trials": total, "rate": same / total if total else math.nan}
        reproduced = [twin_results[side][label][i] for label, i, _ in near]
        matches = [(t.success, t.stage) == (r.success, r.stage) for t, (_, _, r) in zip(reproduced, near)]
        differences = [abs(t.margin - r.margin) for t, (_, _, r) in zip(reproduced, near)]
        study.near_misses[side] = {
            "same_outcome": int(sum(matches)), "same_success": int(sum(t.success == r.success for t, (_, _, r)
                                                                          in zip(reproduced, near))),
            "rate": sum(matches) / len(near) if near else math.nan,
            "median_abs_margin_difference": statistics.median(differences) if near else math.nan}
    for label, i, r in near:
        row = {"policy": label, "trial": i, "perturbation": r.perturbation, "seed": r.seed,
               "cell": {"stage": r.stage, "margin": r.margin}}
        for side in SIDES:
            t = twin_results[side][label][i]
            row[side] = {"stage": t.stage, "margin": t.margin}
        study.near_misses["trials"].append(row)


def run_study(config: FidelityConfig, out: str | Path, workers: int = 1, progress: bool = True,
              log: Callable[[str], None] = print) -> Study:
    """The whole study into `out` (resumable); returns what it measured, after writing the report."""
    t0 = time.monotonic()
    config.check()
    cell = load_cell(config.cell)
    task = load_task(config.task)
    _check_task(cell, task)
    space = task.perturbations.within(config.envelope) if config.envelope else task.perturbations
    factors = list(config.factors) if config.factors is not None else initial_condition_factors(space)
    for name in factors:
        space.factor(name)  # an unknown factor: an error naming the known ones
    for policy in config.policies:  # a policy that cannot run here is refused before anything is recorded
        check_policy(policy, task)
    labels = {p: policy_label(p) for p in config.policies}
    if len(set(labels.values())) != len(labels):
        labels = {p: p for p in config.policies}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()}
    saved = out / "study.json"
    if saved.is_file():
        before = json.loads(saved.read_text())
        changed = sorted(k for k in set(before) | set(stamp) if before.get(k) != stamp.get(k))
        if changed:
            raise ConfigError(str(saved), "", f"the settings this study was started with (changed: {', '.join(changed)}); "
                              "use another --out for other settings", {k: stamp.get(k) for k in changed})
    saved.write_text(json.dumps(stamp, indent=1))

    bag = out / "episodes" / "excitation.mcap"
    if not bag.is_file():
        log(f"recording {config.excitation_s:g} s of excitation in cell {cell.name} -> {bag}")
        bag.parent.mkdir(parents=True, exist_ok=True)
        _record_excitation(cell, bag, config.excitation_s, config.seed, config.real_time_factor)
    t_record = time.monotonic()
    log("fitting the twin on the excitation episode")
    fit_report = _fit(task, bag, out / "twin", workers, log)
    t_fit = time.monotonic()
    study = Study(config=stamp, cell=cell.source, task=task.name, factors=factors,
                  labels={p: labels[p] for p in config.policies}, fit=fit_report)

    points = sample_perturbations(space, config.sim_trials, config.seed, factors)
    refs = {"fitted": task_in_scene(task.name, out / "twin" / "fitted_scene.yaml"), "nominal": task.name}
    # A fitted twin made again (its folder deleted) is another twin: its trials are not the stored ones.
    twins = {"fitted": hashlib.sha256((out / "twin" / "robot_dynamics.yaml").read_bytes()).hexdigest()[:16],
             "nominal": "nominal"}
    twin_results: dict[str, dict[str, list[TrialResult]]] = {side: {} for side in SIDES}
    with TrialStore(out / "trials.sqlite") as store, TrialPool(workers) as pool:
        bar = progress_bar(len(SIDES) * len(config.policies) * len(points), "twin trials", progress)
        try:
            for side in SIDES:
                for policy in config.policies:
                    campaign = f"{side}/{labels[policy]}"
                    store.open_campaign(campaign, {"policy": policy, "task": refs[side], "seed": config.seed,
                                                   "factors": factors, "envelope": config.envelope,
                                                   "twin": twins[side]})
                    planned = [Planned(i, TrialSpec.of(policy, refs[side], p, trial_seed(config.seed, i)), "uniform")
                               for i, p in enumerate(points)]
                    twin_results[side][labels[policy]] = run_trials(planned, store, campaign, pool=pool, bar=bar)
        finally:
            bar.close()
    t_sim = time.monotonic()
    cell_results = _cell_trials(config, cell, task, points[:config.real_trials], labels, out / "cell.sqlite",
                                progress)
    t_cell = time.monotonic()
    compare(study, cell_results, twin_results, config.near_miss)
    study.wall_s = {"record": t_record - t0, "fit": t_fit - t_record, "twin_trials": t_sim - t_fit,
                    "cell_trials": t_cell - t_sim, "total": t_cell - t0}
    write_report(study, out)
    return study


def _cell_trials(config: FidelityConfig, cell: ProxyCellConfig, task, points, labels: Mapping[str, str],
                 store_path: Path, progress: bool) -> dict[str, list[TrialResult]]:
    """Each policy's trials in the cell, through the live ROS graph, stored as each chunk ends."""
    from r2s2r.eval.graph import run_through_graph
    results: dict[str, list[TrialResult]] = {}
    total = len(config.policies) * len(points)
    bar = progress_bar(total, "cell trials (ROS graph)", progress)
    try:
        with TrialStore(store_path) as store:
            for policy in config.policies:
                campaign = labels[policy]
                store.open_campaign(campaign, {"policy": policy, "task": task.name, "cell": cell.source})
                specs = [TrialSpec.of(policy, task.name, p, trial_seed(config.seed, i)) for i, p in enumerate(points)]
                stored = store.stored_ids(s.id for s in specs)
                for i, spec in enumerate(specs):
                    if spec.id in stored:
                        store.link(spec.id, campaign, i, "uniform")
                bar.update(len(stored))
                pending = [(i, s) for i, s in enumerate(specs) if s.id not in stored]
                for start in range(0, len(pending), GRAPH_CHUNK):
                    chunk = pending[start:start + GRAPH_CHUNK]
                    timeout = GRAPH_TRIAL_TIMEOUT_S * len(chunk) / min(config.real_time_factor, 1.0)
                    for (i, _), result in zip(chunk, run_through_graph([s for _, s in chunk], config.real_time_factor,
                                                                       timeout, cell=cell.source)):
                        store.add(result, campaign, i, "uniform")
                        bar.set_postfix_str(f"{campaign}: {result.stage} {result.margin:+.3f}", refresh=False)
                        bar.update(1)
                results[campaign] = [store.get(s.id) for s in specs]
    finally:
        bar.close()
    return results


# -- the report -------------------------------------------------------------------------------------
def _rate_cell(rate: dict) -> str:
    low, high = rate["ci95"]
    return f"{rate['rate']:.1%} <span class=meta>[{low:.0%}, {high:.0%}] of {rate['trials']}</span>"


def _plot_rates(study: Study) -> str | None:
    from r2s2r.eval.report import _png, _pyplot
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    labels = list(study.rates["cell"])
    cell = [study.rates["cell"][k]["rate"] for k in labels]
    ax.plot([0, 1], [0, 1], color="#bbb", lw=1)
    for side, marker, colour in (("fitted", "o", "#1b9e77"), ("nominal", "x", "#d95f02")):
        ax.scatter([study.rates[side][k]["rate"] for k in labels], cell, marker=marker, color=colour, label=side)
    ax.set_xlabel("success rate in the twin")
    ax.set_ylabel("success rate in the cell")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.legend(loc="upper left")
    return _png(fig)


def _finite(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.3f}"


def _finite_or_null(value):
    """JSON has no NaN: an undefined figure (a correlation of constant rates, no near-miss) is null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value


def write_report(study: Study, out: str | Path) -> tuple[Path, Path]:
    """fidelity.json and fidelity.html in `out`."""
    from r2s2r.eval.report import CSS, _esc, _table
    out = Path(out)
    data = asdict(study)
    json_path = out / "fidelity.json"
    json_path.write_text(json.dumps(_finite_or_null(data), indent=1, allow_nan=False))
    labels = list(study.rates["cell"])
    cfg = study.config
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fidelity: {_esc(study.task)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>Does the twin's verdict transfer? {_esc(study.task)} in cell <code>{_esc(study.cell)}</code></h1>",
             f"<p class=meta>{len(labels)} policies; {cfg['sim_trials']} trials each in the fitted and the nominal "
             f"twin, {cfg['real_trials']} in the cell through the ROS graph, from the same initial conditions "
             f"(factors: {_esc(', '.join(study.factors))}; envelope {_esc(cfg['envelope'] or 'none')}; seed "
             f"{cfg['seed']}). Wall time {study.wall_s.get('total', 0):.0f} s.</p>",
             "<h2>Agreement of the ranking with the cell's</h2>",
             _table(["statistic", "fitted twin", "nominal twin", "what it says"], [
                 ["MMRV", _finite(study.agreement["fitted"]["mmrv"]), _finite(study.agreement["nominal"]["mmrv"]),
                  "mean worst rank violation, in the cell's success rate (0 is best)"],
                 ["Pearson", _finite(study.agreement["fitted"]["pearson"]),
                  _finite(study.agreement["nominal"]["pearson"]), "linear agreement of the success rates"],
                 ["Spearman", _finite(study.agreement["fitted"]["spearman"]),
                  _finite(study.agreement["nominal"]["spearman"]), "agreement of the orders"],
                 ["same outcome from the same start", _finite(study.paired["fitted"]["rate"]),
                  _finite(study.paired["nominal"]["rate"]), "share of the cell's trials whose success and stage "
                  "the twin gave from the same initial state"],
                 ["stage distance, all policies", _finite(study.stage_distance["fitted"]["all policies"]),
                  _finite(study.stage_distance["nominal"]["all policies"]),
                  "total variation distance of the failure stages (0: alike, 1: disjoint)"]]),
             f"<img class=plot src='data:image/png;base64,{_plot_rates(study)}'/>",
             "<h2>Success per policy (95 % Wilson intervals)</h2>",
             _table(["policy", "cell", "fitted twin", "nominal twin", "stage distance, fitted", "stage distance, nominal"],
                    [[_esc(k), _rate_cell(study.rates["cell"][k]), _rate_cell(study.rates["fitted"][k]),
                      _rate_cell(study.rates["nominal"][k]), _finite(study.stage_distance["fitted"][k]),
                      _finite(study.stage_distance["nominal"][k])] for k in labels]),
             "<h2>Outcomes by stage</h2>"]
    stages = sorted({s for side in study.stages.values() for counts in side.values() for s in counts})
    rows = []
    for k in labels:
        for side in ("cell",) + SIDES:
            counts = study.stages[side][k]
            n = sum(counts.values())
            rows.append([_esc(k), side] + [f"{counts.get(s, 0) / n:.0%}" if counts.get(s) else "" for s in stages])
    parts.append(_table(["policy", "side"] + stages, rows))
    nm = study.near_misses
    parts.append(f"<h2>Near-misses: the cell's trials with |margin| &le; {nm['threshold']:g}, from the same start in "
                 "the twins</h2>")
    if nm["count"]:
        parts.append(_table(["", "fitted twin", "nominal twin"], [
            ["same outcome (success and stage)", f"{nm['fitted']['same_outcome']} of {nm['count']}",
             f"{nm['nominal']['same_outcome']} of {nm['count']}"],
            ["same success", f"{nm['fitted']['same_success']} of {nm['count']}",
             f"{nm['nominal']['same_success']} of {nm['count']}"],
            ["median |margin difference|", _finite(nm["fitted"]["median_abs_margin_difference"]),
             _finite(nm["nominal"]["median_abs_margin_difference"])]]))
        parts.append(_table(["policy", "trial", "cell", "fitted twin", "nominal twin"], [
            [_esc(r["policy"]), r["trial"]] + [f"{r[s]['stage']} {r[s]['margin']:+.4f}" for s in ("cell",) + SIDES]
            for r in nm["trials"]]))
    else:
        parts.append("<p>None of the cell's trials ended that close to the edge.</p>")
    fit = study.fit
    parts.append("<h2>The fit</h2>")
    if fit.get("adequacy"):
        parts.append(f"<p><b>Warning:</b> {_esc(fit['adequacy'])}</p>")
    parts.append(_table(["parameter", "fitted", "95 % interval", "identifiable"], [
        [_esc(p["name"]), f"{p['value']:.4g}", _esc(p["ci95"]), "yes" if p["identifiable"] else _esc(p["why"] or "no")]
        for p in fit.get("parameters", []) if p.get("fitted", True)] + [
        ["latency_s", f"{fit.get('latency_s', math.nan):.4g}", _esc(fit.get("latency_ci95")), ""]]))
    parts.append("</body></html>")
    html_path = out / "fidelity.html"
    html_path.write_text("".join(parts))
    return json_path, html_path


__all__ = ["FidelityConfig", "Study", "run_study", "compare", "write_report", "policy_label",
           "initial_condition_factors", "INITIAL_CONDITION_KINDS"]
