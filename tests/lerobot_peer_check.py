"""Run by tests/test_lerobot_peer.py in a process of its own: load a dataset r2s2r wrote with the
real lerobot 0.4.4 (`LeRobotDataset(repo_id, root=DIR)`, offline) and compare every frame with
what r2s2r's reader gives, saved beforehand as an .npz.

    python tests/lerobot_peer_check.py PEER_DIR DATASET EXPECTED.npz

lerobot is installed in PEER_DIR (Makefile: `make peer`) without its dependencies: torch < 2.11
is pinned there, and this venv keeps torch 2.13. PEER_DIR is put last on sys.path, so the
packages both have are this venv's. torchvision's PyPI wheel is a CUDA build whose C ops do not
load on this machine: its `_meta_registrations` module is stubbed before the import, and videos
are decoded with PyAV in place of lerobot's torchvision / torchcodec decoders (torchcodec needs
FFmpeg libraries this machine lacks), with lerobot's own tolerance check.
"""

from __future__ import annotations

import sys
import types

import numpy as np


_DECODED: dict = {}


def decode_with_pyav(video_path, timestamps, tolerance_s, backend=None):
    """What lerobot's decoders return: the frames nearest the timestamps, (N, C, H, W) float32 in
    0-1, each within tolerance_s of the asked time, or its FrameTimestampError."""
    import av
    import torch
    from lerobot.datasets.video_utils import FrameTimestampError
    if str(video_path) not in _DECODED:  # every frame of the file once (the check asks for each frame)
        times, frames = [], []
        with av.open(str(video_path)) as container:
            stream = container.streams.video[0]
            for frame in container.decode(stream):
                times.append(float(frame.pts * stream.time_base))
                frames.append(frame.to_ndarray(format="rgb24"))
        _DECODED[str(video_path)] = (np.array(times), frames)
    times, frames = _DECODED[str(video_path)]
    chosen = []
    for t in timestamps:
        nearest = int(np.argmin(np.abs(times - t)))
        if abs(times[nearest] - t) >= tolerance_s:
            raise FrameTimestampError(f"{video_path}: no frame within {tolerance_s} s of {t} (nearest {times[nearest]})")
        chosen.append(frames[nearest])
    return torch.from_numpy(np.stack(chosen)).permute(0, 3, 1, 2).float() / 255


def main(peer: str, root: str, expected_path: str) -> None:
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    sys.path.append(peer)
    import lerobot
    import lerobot.datasets.lerobot_dataset as lerobot_dataset
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    assert lerobot.__version__ == "0.4.4", lerobot.__version__
    lerobot_dataset.decode_video_frames = decode_with_pyav

    expected = dict(np.load(expected_path))
    fps = int(expected["fps"])
    window = [-2 / fps, -1 / fps, 0.0, 1 / fps, 2 / fps]
    video_keys = [k.removeprefix("video:") for k in expected if k.startswith("video:")]
    plain = LeRobotDataset("r2s2r/peer-check", root=root)
    windows = LeRobotDataset("r2s2r/peer-check", root=root,
                             delta_timestamps={"action": window, **{k: window[1:3] for k in video_keys}})
    total = len(expected["index"])
    assert len(plain) == total and plain.num_episodes == int(expected["episodes"]), (len(plain), total)
    assert plain.fps == fps and plain.meta.robot_type == str(expected["robot"])
    assert list(plain.meta.tasks.index) == list(expected["tasks"]), list(plain.meta.tasks.index)
    for key in ("observation.state", "action"):
        np.testing.assert_allclose(plain.meta.stats[key]["mean"], expected[f"mean:{key}"], rtol=1e-6)
    episode = expected["episode_index"]
    for i in range(total):
        item = plain[i]
        for key in ("observation.state", "action", "observation.environment_state"):
            if key in expected:
                np.testing.assert_array_equal(item[key].numpy(), expected[key][i], err_msg=f"frame {i}: {key}")
        assert int(item["episode_index"]) == episode[i] and int(item["index"]) == expected["index"][i]
        assert abs(float(item["timestamp"]) - expected["timestamp"][i]) < 1e-6
        assert item["task"] == str(expected["tasks"][expected["task_index"][i]]), item["task"]
        for key in video_keys:
            image = (item[key].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            np.testing.assert_array_equal(image, expected[f"video:{key}"][i], err_msg=f"frame {i}: {key}")
        # A window around the frame: neighbours of the same episode, padded at its ends.
        item = windows[i]
        same = np.nonzero(episode == episode[i])[0]
        wanted = np.clip(i + np.arange(-2, 3), same[0], same[-1])
        pad = (i + np.arange(-2, 3) < same[0]) | (i + np.arange(-2, 3) > same[-1])
        np.testing.assert_array_equal(item["action"].numpy(), expected["action"][wanted], err_msg=f"window at {i}")
        np.testing.assert_array_equal(item["action_is_pad"].numpy(), pad)
        for key in video_keys:
            frames = (item[key].permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
            np.testing.assert_array_equal(frames, expected[f"video:{key}"][wanted[1:3]], err_msg=f"window {i}: {key}")
    print(f"lerobot {lerobot.__version__}: {total} frames of {plain.num_episodes} episodes equal r2s2r's")


if __name__ == "__main__":
    main(*sys.argv[1:4])
