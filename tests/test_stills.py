"""`r2s2r dataset stills` (data.stills): randomised scenes of a task, the arm posed as a
dataset's states put it, the objects' poses beside the images; resumable, refused by name when
its inputs do not fit."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.data import stills as stills_module
from r2s2r.data.collect import state_names
from r2s2r.data.lerobot_v3 import DatasetError, Episode, Feature, open_dataset, write_episodes
from r2s2r.eval.runner import TrialPool, sample_perturbations
from r2s2r.eval.tasks import load_task
from r2s2r.robots import get_robot
from r2s2r.sim.twin import Twin

TASK = "franka_block_in_bowl"
FR3 = get_robot("franka_fr3")


def poses_dataset(root, robot=FR3, count: int = 12):
    """A dataset of `robot`'s states around its home pose, the grippers half open."""
    names = state_names(robot)
    rng = np.random.default_rng(3)
    home = np.concatenate([robot.home_positions, [0.5 * sum(g.opening_range) for g in robot.grippers]])
    states = (home + rng.uniform(-0.3, 0.3, (count, len(names))) * (np.arange(len(names)) < len(robot.joint_names))
              ).astype(np.float32)
    features = {"observation.state": Feature("float32", (len(names),), names),
                "action": Feature("float32", (len(names),), names)}
    return write_episodes(root, 20, features, robot.name,
                          [Episode("poses", {"observation.state": states, "action": states})])


def options(source, **changes) -> stills_module.StillsOptions:
    settings = dict(task=TASK, scenes=3, poses_from=str(source), poses=2, seed=5, envelope="operating",
                    image_size=(32, 24))
    return stills_module.StillsOptions(**{**settings, **changes})


def frames(dataset) -> dict[str, np.ndarray]:
    episodes = [dataset.episode(i) for i in range(len(dataset.episodes))]
    return {k: np.concatenate([e.frames[k] for e in episodes]) for k in episodes[0].frames}


def test_posing_puts_the_arm_and_gripper_where_asked():
    twin = Twin(load_task(TASK).base_scene)
    arm = FR3.home_positions + 0.2
    twin.pose(arm, np.array([0.03]))
    np.testing.assert_allclose(twin.arm_positions, arm, atol=1e-9)
    np.testing.assert_allclose(twin.gripper_openings, [0.03], atol=1e-6)
    with pytest.raises(ValueError, match="expected"):
        twin.pose(arm[:3], np.array([0.03]))


def test_stills_follow_the_plan_and_resume_after_a_stop(tmp_path, monkeypatch):
    source = poses_dataset(tmp_path / "poses")
    with TrialPool(1) as pool:
        whole = open_dataset(stills_module.render_stills(options(source), tmp_path / "whole", pool, progress=False))
    seen = frames(whole)
    assert len(whole.episodes) == 3 and len(seen["observation.state"]) == 6
    assert set(whole.video_keys) == {"observation.images.scene", "observation.images.wrist"}
    # Each still's arm is one of the source's states.
    rows = open_dataset(source).episode(0, videos=False).frames["observation.state"]
    assert all(np.any(np.all(np.isclose(rows, s, atol=1e-6), axis=1)) for s in seen["observation.state"])
    # Scene i is the plan's perturbation i: the block lies where that perturbation's scene puts it.
    task = load_task(TASK)
    points = sample_perturbations(task.perturbations.within("operating"), 3, 5)
    names = whole.features["observation.environment_state"].names
    x, y = names.index("block.x"), names.index("block.y")
    placed = [next(o for o in task.scene(p).objects if o.name == "block").pos for p in points]
    assert len({round(p[0], 4) for p in placed}) == 3  # three different places
    for i, pos in enumerate(placed):
        for pose in (2 * i, 2 * i + 1):
            np.testing.assert_allclose(seen["observation.environment_state"][pose][[x, y]], pos[:2], atol=1e-6)
    # The two poses of a scene show the same scene from a wrist camera that moved with the arm.
    wrist = seen["observation.images.wrist"].astype(float)
    assert np.abs(wrist[0] - wrist[1]).mean() > 5.0

    # Stopped after its first round of blocks (one scene each), then run again: only the rest is
    # rendered, and the dataset is the uninterrupted one.
    monkeypatch.setattr(stills_module, "BLOCK", 1)
    calls = []

    class Stopping(TrialPool):
        def map(self, fn, items, context=None):
            calls.append(len(items))
            if len(calls) == 2:
                raise KeyboardInterrupt
            return super().map(fn, items, context)

    with Stopping(1) as pool, pytest.raises(KeyboardInterrupt):
        stills_module.render_stills(options(source), tmp_path / "resumed", pool, progress=False)
    assert len(list((tmp_path / "resumed" / ".stills").glob("*.npz"))) == 2
    with pytest.raises(DatasetError, match="other options"):
        with TrialPool(1) as pool:
            stills_module.render_stills(options(source, seed=6), tmp_path / "resumed", pool, progress=False)
    with Stopping(1) as pool:
        resumed = open_dataset(stills_module.render_stills(options(source), tmp_path / "resumed", pool,
                                                           progress=False))
    assert calls == [2, 1, 1]  # the rerun rendered the one scene left
    again = frames(resumed)
    for key in ("observation.state", "observation.environment_state"):
        np.testing.assert_array_equal(again[key], seen[key])
    for key in ("observation.images.scene", "observation.images.wrist"):
        assert np.abs(again[key].astype(int) - seen[key].astype(int)).max() <= 2, key  # the same frames encoded
    assert not (tmp_path / "resumed" / ".stills").exists()


def test_poses_of_another_robot_are_refused_by_name(tmp_path):
    source = poses_dataset(tmp_path / "xarm", get_robot("xarm7"))
    with TrialPool(1) as pool, pytest.raises(DatasetError, match="xarm7.*franka_fr3"):
        stills_module.render_stills(options(source), tmp_path / "out", pool, progress=False)
    with TrialPool(1) as pool, pytest.raises(DatasetError, match="expected 1 or more"):
        stills_module.render_stills(options(source, scenes=0), tmp_path / "none", pool, progress=False)
