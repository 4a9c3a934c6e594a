"""`r2s2r dataset from-mcap` on episodes recorded on the proxy-real cell (real2sim.proxy: a
twin with hidden parameters standing in for a real FR3, recorded as `r2s2r record` records):
the frames are the bag's, resampled on the robot's clock; a bag without what the features need
is refused by name; and the real dataset merges with one collected in the twin."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r import cli
from r2s2r.data.collect import CollectOptions, collect
from r2s2r.data.episode import EpisodeError, load_episode
from r2s2r.data.from_mcap import from_mcap
from r2s2r.data.lerobot_v3 import merge, open_dataset
from r2s2r.eval.runner import TrialPool
from r2s2r.eval.tasks import load_task
from r2s2r.real2sim.proxy import Hidden, ProxyCell, excitation_script
from r2s2r.robots import get_robot
from r2s2r.sim.scene import load_scene

FR3 = get_robot("franka_fr3")
FPS = 20
SIZE = (64, 48)


@pytest.fixture(scope="module")
def bags(tmp_path_factory):
    out = tmp_path_factory.mktemp("real")
    proxy = ProxyCell(load_scene("config/real2sim/proxy_cell.yaml"), Hidden(values={"arm.kp_scale": 0.8}))
    paths, scripts = [], []
    for seed in (0, 1):
        script = excitation_script(FR3, 1.5, seed=seed)
        path = out / f"episode_{seed}.mcap"
        proxy.record(script, path, 1.6, cameras=["scene"], frame_rate_hz=FPS, depth=False)
        paths.append(path)
        scripts.append(script)
    return paths, scripts


def test_the_frames_are_the_recordings(bags, tmp_path):
    paths, scripts = bags
    code = cli.main(["dataset", "from-mcap", *map(str, paths), "--task", "franka_block_in_bowl", "--fps", str(FPS),
                     "--cameras", "scene", "--image-size", f"{SIZE[0]}x{SIZE[1]}", "--out", str(tmp_path / "real")])
    assert code == 0
    dataset = open_dataset(tmp_path / "real")
    assert dataset.tasks == [load_task("franka_block_in_bowl").description]
    assert dataset.fps == FPS and len(dataset.episodes) == 2
    for index, (path, script) in enumerate(zip(paths, scripts)):
        recording = load_episode(path)
        episode = dataset.episode(index)
        times = np.arange(len(episode.frames["action"])) / FPS
        assert len(times) == int(np.floor(recording.duration * FPS + 1e-9)) + 1
        # The state: joint_states interpolated at each frame's time on the robot's clock.
        arm = FR3.group("arm").joints
        expected = np.array([recording.joints.at(t, arm) for t in times], np.float32)
        np.testing.assert_array_equal(episode.frames["observation.state"][:, :7], expected)
        # The action: the target the script streamed last before the frame (or the one before:
        # the bag's clock is the robot's, a fraction of a millisecond from the script's), or,
        # before the first command, where the arm stood.
        for t, action in zip(times, episode.frames["action"][:, :7]):
            if t < script[0].time - 0.002:
                np.testing.assert_allclose(action, recording.joints.at(t, arm), atol=1e-6)
                continue
            issued = [np.array(c.values) for c in script if c.time <= t + 0.002][-2:]
            assert min(np.abs(action - v).max() for v in issued) < 1e-6, f"t={t}"
        # The images: each frame the camera's nearest, resized.
        import cv2
        camera = recording.camera("scene")
        for k in (0, len(times) // 2, len(times) - 1):
            _, rgb = camera.rgb_at(times[k])
            resized = cv2.resize(rgb, SIZE, interpolation=cv2.INTER_AREA).astype(float)
            assert np.abs(episode.frames["observation.images.scene"][k] - resized).mean() < 6.0


def test_a_bag_without_what_the_features_need_is_refused(bags, tmp_path):
    paths, _ = bags
    with pytest.raises(EpisodeError, match="cameras/wrist/image_raw"):
        from_mcap(paths, tmp_path / "x", "t", FPS, cameras=("wrist",))
    with pytest.raises(EpisodeError, match="no frame within"):
        from_mcap(paths, tmp_path / "y", "t", 60, cameras=("scene",))
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    empty = tmp_path / "empty.mcap"
    empty.write_bytes(b"")
    assert cli.main(["dataset", "from-mcap", str(empty), "--task", "t", "--out", str(tmp_path / "z")]) == 2


def test_real_and_simulated_episodes_merge(bags, tmp_path):
    paths, _ = bags
    task = load_task("franka_block_in_bowl").description
    real = from_mcap(paths, tmp_path / "real", task, FPS)
    options = CollectOptions(task="franka_block_in_bowl", policy="scripted:franka_block_in_bowl", episodes=1,
                             keep="all", cameras=())
    with TrialPool(1) as pool:
        collect(options, tmp_path / "sim", pool, progress=False)
    both = open_dataset(merge([tmp_path / "sim", real], tmp_path / "both"))
    assert len(both.episodes) == 3 and both.tasks == [task]
    assert both.episodes[0]["r2s2r/success"] is not None and both.episodes[1]["r2s2r/success"] is None
    assert "recorded" in both.summary()
