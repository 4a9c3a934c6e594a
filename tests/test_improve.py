"""`r2s2r improve` (loop.improve): a tiny budget end to end, with its control arm; killed with
SIGKILL at every step and resumed, it gives what an uninterrupted run gives (so it is also
deterministic for a seed); its targeted conditions lie inside the clusters they came from; the
held-out trials' seeds are never used by a search or a collection; every episode of the data
carries its round and origin."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from r2s2r.data.collect import CollectOptions, collect
from r2s2r.data.lerobot_v3 import open_dataset
from r2s2r.eval.runner import TrialPool, TrialResult, trial_seed
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.loop.improve import HELD_OUT, ImproveConfig, ImproveError, run_improve, stream_seed, targeted_conditions
from r2s2r.search.atlas import build_atlas
from r2s2r.search.campaign import SearchOutcome, SearchSpace
from r2s2r.search.refine import bisect, pair_with_successes
from r2s2r.train.trainer import TrainConfig, Trainer
from r2s2r.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
TASK = "franka_block_in_bowl"
SETTINGS = dict(task=TASK, rounds=1, search_budget=4, demos_per_round=2, envelope="operating", control="uniform",
                held_out=4, sampler="uniform", train_steps=20, seed=3, relabelled_per_round=1)
STEPS = ["start/evaluate", "targeted/search", "targeted/demonstrations", "targeted/relabelled", "targeted/dataset",
         "targeted/train", "targeted/evaluate", "uniform/demonstrations", "uniform/relabelled", "uniform/dataset",
         "uniform/train", "uniform/evaluate"]


@pytest.fixture(scope="module")
def start_run(tmp_path_factory):
    """A state policy trained briefly on three expert demonstrations: it fails, which is the point."""
    root = tmp_path_factory.mktemp("improve_start")
    with TrialPool(1) as pool:
        collect(CollectOptions(TASK, f"scripted:{TASK}", 3, seed=5, envelope="operating", cameras=(),
                               privileged=True), root / "demos", pool, progress=False)
    Trainer(TrainConfig(dataset=str(root / "demos"), policy="mlp", steps=30, batch=16, checkpoint_every=10,
                        privileged=True, model={"hidden": 32, "layers": 2}), root / "run").train(progress=False)
    return root / "run"


@pytest.fixture(scope="module")
def reference(start_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("improve_reference") / "out"
    return run_improve(ImproveConfig(policy=str(start_run), **SETTINGS), out, workers=1, progress=False)


def steps_logged(out: Path) -> list[str]:
    path = out / "progress.jsonl"
    if not path.is_file():
        return []
    return [f"{e['arm']}/{e['step']}" for e in map(json.loads, path.read_text().splitlines())]


def outcomes(out: Path) -> dict:
    """What a run found, free of where it ran: per arm and round, each held-out trial's result
    and the data spent."""
    summary = json.loads((out / "summary.json").read_text())
    store = TrialStore(out / "trials.sqlite")
    found = {}
    for arm, rounds in [("start", [summary["start"]]), *summary["rounds"].items()]:
        for r in rounds:
            campaign = f"held-out-{arm}-{r['round']}"
            found[campaign] = [(t.seed, tuple(sorted(t.perturbation.items())), t.success, t.margin, t.stage)
                               for t in store.results(campaign)]
            found[f"{campaign} data"] = [r[k] for k in ("successes", "trials", "demos", "total_episodes",
                                                        "collection_trials", "search_trials", "origins")]
            # The clusters, without their trials' ids (a trial's id names the checkpoint's path).
            found[f"{campaign} atlas"] = [(c["stage"], c["size"], c["conditions"]) for c in r["atlas"]["clusters"]]
    store.close()
    return found


def episodes(dataset: Path) -> list[tuple]:
    return [(e["r2s2r/round"], e["r2s2r/origin"], e["r2s2r/seed"], e["r2s2r/perturbation"])
            for e in open_dataset(dataset).episodes]


def test_a_tiny_improvement_runs_end_to_end_with_its_control_arm(reference, start_run):
    out = reference.out
    assert steps_logged(out) == STEPS
    assert reference.start.trials == 4 and set(reference.rounds) == {"targeted", "uniform"}
    held_out = stream_seed(SETTINGS["seed"], HELD_OUT)
    reserved = {trial_seed(held_out, i) for i in range(SETTINGS["held_out"])}
    store = TrialStore(out / "trials.sqlite")
    try:
        campaigns = {c for (c,) in store.db.execute("SELECT name FROM campaigns")}
        # Every arm and round is evaluated on the very same held-out trials: same seeds, same perturbations.
        held = {c: [(t.seed, t.perturbation) for t in store.results(c)] for c in campaigns if c.startswith("held-out")}
        assert len(held) == 3 and all(v == held["held-out-start-0"] for v in held.values())
        assert {s for s, _ in held["held-out-start-0"]} == reserved
        # No other trial (the failure search's) draws a held-out seed.
        others = [t for c in campaigns if not c.startswith("held-out") for t in store.results(c)]
        assert len(others) == SETTINGS["search_budget"] and not {t.seed for t in others} & reserved
    finally:
        store.close()
    for arm, rounds in reference.rounds.items():
        (r,) = rounds
        assert r.demos == 2 and r.relabelled == 1 and r.total_episodes == 6 and r.trials == 4
        assert r.collection_trials >= 2 and r.train_steps == 20
        assert (r.search_trials == SETTINGS["search_budget"]) == (arm == "targeted")
        data = episodes(out / arm / "round_1" / "dataset")
        # The start's three episodes, then this round's two demonstrations and its relabelled rollout of
        # the starting checkpoint, each labelled with its round and origin.
        assert [(e[0], e[1]) for e in data] == [(0, "start")] * 3 + [(1, f"{arm} expert")] * 2 + \
            [(1, f"{arm} relabelled")]
        assert [e["r2s2r/actions"] for e in open_dataset(out / arm / "round_1" / "dataset").episodes][-1] == \
            f"scripted:{TASK} (state feedback)"
        # The collections' seeds are not the held-out ones either.
        assert not {e[2] for e in data} & reserved
        # And the checkpoint evaluated is the one trained on that data.
        config = json.loads((Path(r.checkpoint).parent.parent / "config.json").read_text())
        assert Path(config["dataset"]) == out / arm / "round_1" / "dataset" and config["init"] is None
    # The targeted demonstrations were drawn at the search's failures: inside its clusters.
    conditions = json.loads((out / "targeted" / "round_1" / "conditions.json").read_text())
    clusters = {f"cluster {c['index']}": c for c in conditions["atlas"]["clusters"]}
    assert conditions["conditions"] and clusters
    for condition in conditions["conditions"]:
        cluster = clusters[condition["origin"]]
        for bound in cluster["conditions"]:
            assert bound["low"] - 1e-9 <= condition["values"][bound["factor"]] <= bound["high"] + 1e-9
    targeted_demos = {e[3] for e in episodes(out / "targeted" / "round_1" / "dataset")[3:]}  # and relabelled
    drawn = {json.dumps(c["values"], sort_keys=True) for c in conditions["conditions"]}
    assert targeted_demos <= drawn
    summary = json.loads((out / "summary.json").read_text())
    assert summary["comparisons"][0]["round"] == 1 and 0.0 <= summary["comparisons"][0]["p_value"] <= 1.0
    page = reference.report.read_text()
    assert "Targeted against uniform" in page and page.count("<img") >= 2


def test_killed_at_every_step_it_resumes_to_the_same_results(reference, start_run, tmp_path):
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "r2s2r.cli", "improve", "--policy", str(start_run), "--task", TASK,
               "--rounds", "1", "--search-budget", "4", "--demos-per-round", "2", "--envelope", "operating",
               "--control", "uniform", "--held-out", "4", "--sampler", "uniform", "--train-steps", "20",
               "--seed", "3", "--relabelled-per-round", "1", "--workers", "1", "--no-progress", "--out", str(out)]
    for step in STEPS:  # killed as each step begins, then started again
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            assert wait_for(lambda step=step, proc=proc: step in steps_logged(out) or proc.poll() is not None, 600), \
                f"step {step} did not begin within 600 s"
            assert proc.poll() is None, f"the run ended before step {step}: {proc.stdout.read()[-3000:]}"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "round 1: targeted - uniform" in run.stdout
    # Nothing lost or doubled, and every result the same as the uninterrupted run's.
    assert outcomes(out) == outcomes(reference.out)
    for arm in ("targeted", "uniform"):
        assert episodes(out / arm / "round_1" / "dataset") == episodes(reference.out / arm / "round_1" / "dataset")
    # A run started with other settings is refused by name.
    with pytest.raises(ImproveError, match="demos_per_round: 2"):
        run_improve(ImproveConfig(policy=str(start_run), **{**SETTINGS, "demos_per_round": 3}), out, progress=False)


def test_targeted_conditions_lie_in_their_clusters_and_across_the_boundaries():
    task = load_task(TASK)
    space = SearchSpace(task.perturbations, None, "operating")
    rng = np.random.default_rng(0)
    x_index = space.names.index("block_x")
    units = {}

    def run(points):  # the policy fails wherever the block lies in the upper third of its range
        out = []
        for unit in points:
            failed = unit[x_index] > 2 / 3
            result = TrialResult(f"t{len(units)}", "p", TASK, len(units), None, space.values(unit), not failed,
                                 -0.1 if failed else 0.1, "missed_grasp" if failed else "success", 1.0, 0.0)
            units[result.id] = np.asarray(unit)
            out.append(result)
        return out
    results = run(rng.random((200, space.dim)))
    atlas = build_atlas(results, space.space, space.names)
    assert atlas.clusters
    refined = []
    boundaries = bisect(pair_with_successes(atlas, results, units), 6, lambda p: refined.extend(run(p)) or refined[-len(p):])
    outcome = SearchOutcome("c", Path("s"), {}, results, refined, atlas, boundaries, space.space, units)
    drawn = targeted_conditions(outcome, space, 60, np.random.default_rng(1), boundary_share=0.5)
    assert len(drawn) == 60
    by_origin = {}
    for c in drawn:
        by_origin.setdefault(c.origin.split()[0], []).append(c)
    assert len(by_origin["cluster"]) == 30 and len(by_origin["boundary"]) == 30
    for c in by_origin["cluster"]:
        cluster = atlas.clusters[int(c.origin.split()[1])]
        assert cluster.contains(np.array(c.unit), space.names)
    # Across the boundary, where failure turns into success, on both sides of it.
    xs = np.array([c.unit[x_index] for c in by_origin["boundary"]])
    assert abs(np.median(xs) - 2 / 3) < 0.05 and (xs < 2 / 3).any() and (xs > 2 / 3).any()
    # A share of them targeted, the rest uniform over the envelope.
    mixed = targeted_conditions(outcome, space, 60, np.random.default_rng(1), boundary_share=0.5, targeted_share=0.75)
    assert sum(c.origin == "uniform" for c in mixed) == 15 and len(mixed) == 60
    # The same draw for the same generator.
    again = targeted_conditions(outcome, space, 60, np.random.default_rng(1), boundary_share=0.5)
    assert [c.unit for c in again] == [c.unit for c in drawn]
