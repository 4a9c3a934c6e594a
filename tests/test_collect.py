"""`r2s2r collect`: demonstrations of the scripted expert in the twin, as a LeRobot dataset.

The frames are the trial's (its outcome unchanged by the recording, the objects' poses agreeing
with it), the same options give the same dataset on one worker or two, a collection killed
with SIGKILL resumes with nothing lost or doubled, and conditions and options are checked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from r2s2r.data.collect import CollectOptions, Staging, collect, read_conditions, state_names
from r2s2r.data.lerobot_v3 import DatasetError, open_dataset
from r2s2r.eval.runner import TrialPool, TrialSpec, TrialWorker
from r2s2r.eval.tasks import load_task
from r2s2r.processes import sole_writer
from r2s2r.robots import get_robot
from r2s2r.waiting import wait_for
from tests.conftest import REPO

TASK = "franka_block_in_bowl"
EXPERT = f"scripted:{TASK}"
OPTIONS = CollectOptions(task=TASK, policy=EXPERT, episodes=3, seed=5, keep="success", envelope="operating",
                         cameras=(), privileged=True)


def data_rows(root) -> dict:
    """Every frame's fields and every episode's metadata (without the file positions)."""
    dataset = open_dataset(root)
    rows = pq.read_table(next(root.glob("data/*/*.parquet"))).to_pydict()
    episodes = [{k: v for k, v in e.items() if not k.startswith(("data/", "meta/"))} for e in dataset.episodes]
    return {"rows": rows, "episodes": episodes}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("collect") / "one_worker"
    with TrialPool(1) as pool:
        done = collect(OPTIONS, out, pool, progress=False)
    return out, done


def test_the_frames_are_the_trials(reference):
    out, done = reference
    dataset = open_dataset(out)
    assert done.episodes == 3 and len(dataset.episodes) == 3 and done.trials >= 3
    robot = get_robot("franka_fr3")
    assert dataset.features["observation.state"].names == state_names(robot) == dataset.features["action"].names
    meta = json.loads((out / "meta/r2s2r.json").read_text())
    assert meta["privileged"] == ["observation.environment_state"] and meta["task"] == TASK
    assert not (out / ".collect").exists(), "the staging is removed once the dataset is written"
    task = load_task(TASK)
    worker = TrialWorker()
    names = dataset.features["observation.environment_state"].names
    block = [names.index(f"block.{axis}") for axis in "xyz"]
    bowl = [names.index(f"bowl.{axis}") for axis in "xyz"]
    for index, row in enumerate(dataset.episodes):
        episode = dataset.episode(index)
        assert row["r2s2r/success"], "keep=success keeps successful episodes only"
        # The same trial, unrecorded, ends the same: recording does not change what the twin does.
        spec = TrialSpec.of(EXPERT, TASK, json.loads(row["r2s2r/perturbation"]), row["r2s2r/seed"])
        assert spec.id == row["r2s2r/trial_id"]
        alone = worker.run(spec)
        assert (alone.success, alone.margin, alone.stage) == (True, row["r2s2r/margin"], row["r2s2r/stage"])
        frames = len(episode.frames["action"])
        assert frames == pytest.approx(alone.sim_time_s * task.control_rate_hz, abs=1)
        # The action of a tick is where the arm goes next (the limiter takes it there over some
        # ticks): the states follow the actions, closer to the action a tick before than to their own.
        state, action = episode.frames["observation.state"], episode.frames["action"]
        arm = slice(0, 7)
        assert np.abs(action[1:, arm] - action[:-1, arm]).max() > 1e-3, "the expert moved the arm"
        ahead = np.abs(action[:-1, arm] - state[1:, arm]).mean()
        assert ahead < np.abs(action[:-1, arm] - state[:-1, arm]).mean()
        # The privileged poses agree with the outcome: the block ends over the bowl, raised from where it started.
        env = episode.frames["observation.environment_state"]
        assert np.linalg.norm(env[-1, block][:2] - env[-1, bowl][:2]) < 0.1
        assert np.linalg.norm(env[0, block][:2] - env[-1, block][:2]) > 0.02


def test_the_same_options_give_the_same_dataset_on_two_workers(reference, tmp_path):
    out, _ = reference
    with TrialPool(2) as pool:
        collect(OPTIONS, tmp_path / "two_workers", pool, progress=False)
    assert data_rows(tmp_path / "two_workers") == data_rows(out)


def test_a_killed_collection_resumes_with_nothing_lost_or_doubled(reference, tmp_path):
    out, _ = reference
    resumed = tmp_path / "resumed"
    command = [sys.executable, "-m", "r2s2r.cli", "collect", "--task", TASK, "--policy", EXPERT, "--episodes", "3",
               "--seed", "5", "--keep", "success", "--envelope", "operating", "--cameras", "", "--privileged",
               "--no-progress", "--out", str(resumed)]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    staged = resumed / ".collect" / "episodes"
    try:
        assert wait_for(lambda: len(list(staged.glob("*.npz"))) >= 1 or proc.poll() is not None, 300), \
            "no episode staged within 300 s"
        assert proc.poll() is None, f"the collection ended before the kill: {proc.stdout.read()[-2000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    before = {p.name for p in staged.glob("*.npz")}
    assert before and not (resumed / "meta" / "info.json").exists()
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "3 episodes from" in run.stdout
    assert data_rows(resumed) == data_rows(out)


def test_other_options_do_not_resume_a_collection(tmp_path):
    Staging(tmp_path / "ds", OPTIONS).open()
    with TrialPool(1) as pool, pytest.raises(DatasetError, match="seed: 5"):
        collect(CollectOptions(**{**OPTIONS.__dict__, "seed": 6}), tmp_path / "ds", pool, progress=False)


def test_one_collection_at_a_time_writes_a_folder(tmp_path):
    # A second collection into a folder another one is writing is refused at once, by name.
    with sole_writer(tmp_path / "ds", "r2s2r collect", DatasetError):
        with pytest.raises(DatasetError, match="another r2s2r collect is writing here now"):
            collect(OPTIONS, tmp_path / "ds", pool=None, progress=False)
    # Options refused before anything is written leave no folder behind.
    with pytest.raises(DatasetError, match="episodes 0"):
        collect(CollectOptions(**{**OPTIONS.__dict__, "episodes": 0}), tmp_path / "new", pool=None, progress=False)
    assert not (tmp_path / "new").exists()


def test_conditions_are_checked_and_cycled(tmp_path):
    task = load_task(TASK)
    path = tmp_path / "conditions.yaml"
    path.write_text("- {block_x: 0.1, block_yaw: 0.2}\n- {bowl_y: 0.05}\n")
    conditions = read_conditions(path, task)
    assert conditions == ((("block_x", 0.1), ("block_yaw", 0.2)), (("bowl_y", 0.05),))
    for text, message in (("- {block_x: 9.0}\n", "block_x = 9.0"), ("- {no_such: 1}\n", "no_such"),
                          ("- {block_x: fast}\n", "expected a number"), ("{}\n", "non-empty list")):
        path.write_text(text)
        with pytest.raises(DatasetError, match=message):
            read_conditions(path, task)
    options = CollectOptions(task=TASK, policy=EXPERT, episodes=3, keep="all", conditions=conditions, cameras=())
    with TrialPool(1) as pool:
        collect(options, tmp_path / "ds", pool, progress=False)
    perturbations = [json.loads(e["r2s2r/perturbation"]) for e in open_dataset(tmp_path / "ds").episodes]
    assert [(p["block_x"], p["block_yaw"]) for p in (perturbations[0], perturbations[2])] == [(0.1, 0.2)] * 2
    assert perturbations[1] == {"bowl_y": 0.05}
