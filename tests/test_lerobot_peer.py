"""The chain to lerobot: demonstrations collected in the twin (`r2s2r collect`) load in the real
lerobot 0.4.4, offline, frame for frame as r2s2r reads them (tests/lerobot_peer_check.py runs
lerobot in a process of its own; the Makefile installs it in .peer, see there)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from r2s2r.data.collect import CollectOptions, collect
from r2s2r.data.lerobot_v3 import open_dataset
from r2s2r.eval.runner import TrialPool
from tests.conftest import REPO

PEER = REPO / ".peer"


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("peer") / "block_in_bowl"
    options = CollectOptions(task="franka_block_in_bowl", policy="scripted:franka_block_in_bowl", episodes=2,
                             keep="all", envelope="operating", cameras=("scene",), image_size=(64, 48),
                             privileged=True)
    with TrialPool(1) as pool:
        collect(options, out, pool, progress=False)
    return out


def test_a_collected_dataset_loads_in_lerobot_frame_for_frame(collected, tmp_path):
    assert (PEER / "lerobot" / "__init__.py").is_file(), \
        f"lerobot 0.4.4 is not installed in {PEER}: `make test` installs it (Makefile target {PEER.name})"
    dataset = open_dataset(collected)
    episodes = list(dataset)
    expected = {"fps": np.array(dataset.fps), "episodes": np.array(len(episodes)),
                "robot": np.array(dataset.robot_type), "tasks": np.array(dataset.tasks)}
    for key in ("observation.state", "action", "observation.environment_state", "index", "episode_index",
                "timestamp", "task_index"):
        expected[key] = np.concatenate([e.frames[key] for e in episodes])
    for key in dataset.video_keys:
        expected[f"video:{key}"] = np.concatenate([e.frames[key] for e in episodes])
    for key in ("observation.state", "action"):
        expected[f"mean:{key}"] = np.array(dataset.stats[key]["mean"])
    path = tmp_path / "expected.npz"
    np.savez(path, **expected)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"), HF_DATASETS_OFFLINE="1",
               HF_DATASETS_CACHE=str(tmp_path / "hf_datasets"))
    run = subprocess.run([sys.executable, str(REPO / "tests" / "lerobot_peer_check.py"), str(PEER), str(collected),
                          str(path)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert f"{len(expected['index'])} frames of 2 episodes equal r2s2r's" in run.stdout, run.stdout
