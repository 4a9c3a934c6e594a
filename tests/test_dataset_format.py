"""The LeRobotDataset v3.0 writer and reader (data.lerobot_v3) on synthetic episodes: what is
written reads back (vectors exactly, images within the codec's error), the statistics are
numpy's over every frame, episodes share files, and a truncated or inconsistent dataset is
refused with a message that names the file."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from r2s2r.data import lerobot_v3
from r2s2r.data.lerobot_v3 import (QUANTILES, DatasetError, DatasetWriter, Episode, Feature, merge, open_dataset,
                                   write_episodes)

FPS = 10
WIDTH, HEIGHT = 64, 48
IMAGE_TOLERANCE = 6.0  # mean absolute error in levels of 255 that h264 / AV1 at crf 23 stay within on these images


def features(video: bool = True) -> dict[str, Feature]:
    out = {"observation.state": Feature("float32", (3,), ["a", "b", "c"]),
           "action": Feature("float32", (3,), ["a", "b", "c"])}
    if video:
        out["observation.images.scene"] = Feature("video", (HEIGHT, WIDTH, 3))
    return out


def images(rng, count: int) -> np.ndarray:
    """Smooth moving gradients with a square: what a codec keeps well, and different each frame."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    frames = []
    for k in range(count):
        base = np.stack([(x * 3 + k * 5) % 256, (y * 4 + k * 3) % 256, np.full_like(x, 40 + 10 * (k % 10))], -1)
        cx, cy = int(rng.integers(8, WIDTH - 8)), int(rng.integers(8, HEIGHT - 8))
        base[cy - 6:cy + 6, cx - 6:cx + 6] = (230, 30, 30)
        frames.append(base.astype(np.uint8))
    return np.stack(frames)


def episode(rng, length: int, task: str = "stack the cups", video: bool = True, **meta) -> Episode:
    frames = {"observation.state": rng.normal(size=(length, 3)).astype(np.float32),
              "action": rng.normal(size=(length, 3)).astype(np.float32)}
    if video:
        frames["observation.images.scene"] = images(rng, length)
    return Episode(task, frames, dict(meta))


@pytest.fixture
def written(tmp_path):
    rng = np.random.default_rng(0)
    episodes = [episode(rng, n, task="stack the cups" if i != 1 else "open the drawer", **{"r2s2r/seed": i})
                for i, n in enumerate((12, 7, 20))]
    root = write_episodes(tmp_path / "ds", FPS, features(), "franka_fr3", episodes)
    return root, episodes


def test_what_is_written_reads_back(written):
    root, episodes = written
    dataset = open_dataset(root)
    assert dataset.fps == FPS and dataset.robot_type == "franka_fr3"
    assert dataset.total_frames == sum(e.length for e in episodes) == 39
    assert dataset.tasks == ["stack the cups", "open the drawer"]
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3 and info["total_tasks"] == 2
    assert info["features"]["observation.images.scene"]["info"]["video.height"] == HEIGHT
    assert info["features"]["observation.images.scene"]["info"]["video.pix_fmt"] == "yuv420p"
    # Every episode in one data file and one video file, one after another.
    assert len(list(root.glob("data/*/*.parquet"))) == 1
    assert len(list(root.glob("videos/observation.images.scene/*/*.mp4"))) == 1
    for index, original in enumerate(episodes):
        read = dataset.episode(index)
        assert read.task == original.task
        assert read.meta["r2s2r/seed"] == index
        for key in ("observation.state", "action"):
            np.testing.assert_array_equal(read.frames[key], original.frames[key])
        np.testing.assert_array_equal(read.frames["frame_index"], np.arange(original.length))
        np.testing.assert_allclose(read.frames["timestamp"], np.arange(original.length) / FPS, atol=1e-6)
        decoded = read.frames["observation.images.scene"].astype(float)
        error = np.abs(decoded - original.frames["observation.images.scene"]).mean(axis=(1, 2, 3))
        assert error.max() < IMAGE_TOLERANCE, f"episode {index}: mean error per frame {error.round(2)}"
        # Each frame is its own, not a neighbour's: the nearest original frame is the same index.
        nearest = [int(np.argmin(np.abs(original.frames["observation.images.scene"].astype(float) - d)
                                 .mean(axis=(1, 2, 3)))) for d in decoded]
        assert nearest == list(range(original.length))
    rows = pq.read_table(next(root.glob("data/*/*.parquet")))
    assert rows.column("index").to_pylist() == list(range(39))
    assert rows.column("episode_index").to_pylist() == [0] * 12 + [1] * 7 + [2] * 20


def test_the_statistics_are_numpys(written):
    root, episodes = written
    stats = json.loads((root / "meta/stats.json").read_text())
    for key in ("observation.state", "action"):
        values = np.concatenate([e.frames[key] for e in episodes]).astype(np.float64)
        expected = {"min": values.min(0), "max": values.max(0), "mean": values.mean(0), "std": values.std(0),
                    **{k: np.quantile(values, q, axis=0) for k, q in QUANTILES.items()}}
        for name, value in expected.items():
            np.testing.assert_allclose(stats[key][name], value, rtol=1e-6, atol=1e-7, err_msg=f"{key} {name}")
        assert stats[key]["count"] == [39]
    pixels = np.concatenate([e.frames["observation.images.scene"] for e in episodes]).reshape(-1, 3) / 255.0
    image = stats["observation.images.scene"]
    assert np.array(image["mean"]).shape == (3, 1, 1)
    for name, value in {"min": pixels.min(0), "max": pixels.max(0), "mean": pixels.mean(0), "std": pixels.std(0),
                        **{k: np.quantile(pixels, q, axis=0) for k, q in QUANTILES.items()}}.items():
        np.testing.assert_allclose(np.array(image[name]).ravel(), value, rtol=1e-9, atol=1e-12, err_msg=name)
    # Per episode too, in meta/episodes.
    table = pq.read_table(next(root.glob("meta/episodes/*/*.parquet"))).to_pylist()
    np.testing.assert_allclose(table[1]["stats/action/mean"], episodes[1].frames["action"].astype(float).mean(0),
                               rtol=1e-6)
    assert [row["dataset_from_index"] for row in table] == [0, 12, 19]


def test_a_truncated_or_inconsistent_dataset_is_refused_by_name(written, tmp_path):
    root, _ = written

    def broken(name, change):
        copy = tmp_path / name
        shutil.copytree(root, copy)
        change(copy)
        with pytest.raises(DatasetError) as error:
            open_dataset(copy)
        return str(error.value)

    assert "unfinished" in broken("no_info", lambda r: (r / "meta/info.json").unlink())
    data_file = next(root.glob("data/*/*.parquet")).relative_to(root)

    def truncate(path):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert str(data_file) in broken("half_data", lambda r: truncate(r / data_file)) and "truncated" in \
        broken("half_data2", lambda r: truncate(r / data_file))
    video = next(root.glob("videos/*/*/*.mp4")).relative_to(root)
    assert str(video) in broken("no_video", lambda r: (r / video).unlink())
    assert str(video) in broken("half_video", lambda r: truncate(r / video))

    def more_frames(r):
        info = json.loads((r / "meta/info.json").read_text())
        info["total_frames"] += 1
        (r / "meta/info.json").write_text(json.dumps(info))
    assert "total_frames" in broken("frames", more_frames)

    def old_version(r):
        info = json.loads((r / "meta/info.json").read_text())
        info["codebase_version"] = "v2.1"
        (r / "meta/info.json").write_text(json.dumps(info))
    assert "v2.1" in broken("version", old_version)


def test_the_writer_refuses_what_lerobot_could_not_read(tmp_path):
    rng = np.random.default_rng(1)
    with pytest.raises(DatasetError, match="even"):
        DatasetWriter(tmp_path / "odd", FPS, {"observation.images.x": Feature("video", (47, 64, 3))}, "r")
    with pytest.raises(DatasetError, match="whole number"):
        DatasetWriter(tmp_path / "fps", 12.5, features(False), "r")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(DatasetError, match="not an empty folder"):
        DatasetWriter(tmp_path / "full", FPS, features(False), "r")
    writer = DatasetWriter(tmp_path / "w", FPS, features(False), "r")
    bad = episode(rng, 5, video=False)
    bad.frames["action"] = bad.frames["action"][:, :2]
    with pytest.raises(DatasetError, match="action has shape"):
        writer.add(bad)
    nan = episode(rng, 5, video=False)
    nan.frames["observation.state"][2, 1] = np.nan
    with pytest.raises(DatasetError, match="NaN"):
        writer.add(nan)
    short = episode(rng, 5, video=False)
    short.frames["action"] = short.frames["action"][:4]
    with pytest.raises(DatasetError, match="one length"):
        writer.add(short)
    with pytest.raises(DatasetError, match="no episode"):
        writer.close()


def test_episodes_roll_over_into_new_files(tmp_path, monkeypatch):
    """Past the file sizes, episodes go to the next data and video files; the reader follows."""
    monkeypatch.setattr(lerobot_v3, "DATA_FILE_MB", 0.0001)
    monkeypatch.setattr(lerobot_v3, "VIDEO_FILE_MB", 0.0001)
    rng = np.random.default_rng(2)
    episodes = [episode(rng, 6) for _ in range(3)]
    root = write_episodes(tmp_path / "ds", FPS, features(), "r", episodes)
    assert len(list(root.glob("data/*/*.parquet"))) == 3
    assert len(list(root.glob("videos/*/*/*.mp4"))) == 3
    dataset = open_dataset(root)
    assert [e["data/file_index"] for e in dataset.episodes] == [0, 1, 2]
    assert [e["videos/observation.images.scene/from_timestamp"] for e in dataset.episodes] == [0.0, 0.0, 0.0]
    for index, original in enumerate(episodes):
        np.testing.assert_array_equal(dataset.episode(index).frames["action"], original.frames["action"])


def test_merge_joins_datasets_with_the_same_features(tmp_path):
    rng = np.random.default_rng(3)
    sim = write_episodes(tmp_path / "sim", FPS, features(), "franka_fr3", [episode(rng, 5), episode(rng, 8)])
    real = write_episodes(tmp_path / "real", FPS, features(), "franka_fr3", [episode(rng, 6, task="real")])
    merged = open_dataset(merge([sim, real], tmp_path / "both"))
    assert len(merged.episodes) == 3 and merged.total_frames == 19
    assert merged.tasks == ["stack the cups", "real"]
    np.testing.assert_array_equal(merged.episode(2).frames["action"], open_dataset(real).episode(0).frames["action"])
    assert merged.episode(2).meta["r2s2r/source"] == str(real)
    other = write_episodes(tmp_path / "other", FPS, features(False), "franka_fr3", [episode(rng, 5, video=False)])
    with pytest.raises(DatasetError, match="features"):
        merge([sim, other], tmp_path / "mixed")
