"""`r2s2r dataset from-mcap`: episodes recorded with `r2s2r record` (a real or proxy cell) as a
LeRobot v3.0 dataset with the features `r2s2r collect` writes, so the two merge.

Each bag is read onto the robot's clock (data.episode.load_episode) and resampled at the
dataset's fps, frame k at k / fps from the first joint state:
- `observation.state`: the joint positions there (linear between joint_states messages), each
  gripper's opening the sum of its finger joints;
- `action`: what was commanded last at or before that time, per group (a streamed target, or a
  trajectory's point interpolated at that time) and per gripper; before a group's first command,
  where it stood;
- `observation.images.<camera>`: the camera's frame nearest that time, resized to the
  dataset's image size. A frame further than one period away is a gap the bag cannot fill: the
  episode is refused, naming the camera and the time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from r2s2r.contract.names import Topics
from r2s2r.data.collect import state_names
from r2s2r.data.episode import Command, EpisodeError, load_episode
from r2s2r.data.episode import Episode as Recording
from r2s2r.data.lerobot_v3 import DatasetError, DatasetWriter, Episode, Feature


def _trajectory_target(command: Command, t: float) -> np.ndarray:
    """A trajectory's positions at time t (linear between its points, held before and after)."""
    start = command.time if command.start is None else command.start
    elapsed = t - start
    values = np.atleast_2d(command.values)
    return np.array([np.interp(elapsed, command.times, values[:, j]) for j in range(values.shape[1])])


def commanded(recording: Recording, times: np.ndarray) -> np.ndarray:
    """The action at each of `times`: (len(times), groups' joints + grippers), state_names order."""
    robot = recording.robot
    out = np.empty((len(times), len(state_names(robot))))
    column = 0
    for group in robot.groups:
        held = np.array([recording.joints.at(t, group.joints) for t in times])  # where it stood
        commands = [c for c in recording.commands if c.target == group.name and c.kind in ("positions", "streaming", "trajectory")]
        for row, t in enumerate(times):
            last = next((c for c in reversed(commands) if c.time <= t + 1e-9), None)
            if last is None:
                continue
            if last.kind in ("positions", "streaming"):
                held[row] = last.values
            else:
                order = [list(last.names).index(j) for j in group.joints]
                held[row] = _trajectory_target(last, t)[order]
        out[:, column:column + len(group.joints)] = held
        column += len(group.joints)
    for gripper in robot.grippers:
        opening = np.array([recording.joints.at(t, gripper.joints).sum() for t in times])
        commands = [c for c in recording.commands if c.target == gripper.name and c.kind == "gripper"]
        for row, t in enumerate(times):
            last = next((c for c in reversed(commands) if c.time <= t + 1e-9), None)
            if last is not None:
                opening[row] = float(np.asarray(last.values).ravel()[0])
        out[:, column] = opening
        column += 1
    return out


def observed(recording: Recording, times: np.ndarray) -> np.ndarray:
    robot = recording.robot
    parts = [np.array([recording.joints.at(t, g.joints) for t in times]) for g in robot.groups]
    parts += [np.array([[recording.joints.at(t, g.joints).sum()] for t in times]) for g in robot.grippers]
    return np.concatenate(parts, axis=1)


def images(recording: Recording, camera: str, times: np.ndarray, size: tuple[int, int], fps: int) -> np.ndarray:
    import cv2
    if camera not in recording.cameras:
        topic = Topics.camera_image(camera)
        raise EpisodeError(f"{recording.source}: no images on {topic}; the dataset's camera {camera!r} needs them "
                           f"(recorded cameras: {', '.join(recording.cameras) or 'none'})")
    stream = recording.cameras[camera]
    frames = []
    for t in times:
        at, rgb = stream.rgb_at(t)
        if abs(at - t) > 1.0 / fps + 1e-6:
            raise EpisodeError(f"{recording.source}: camera {camera} has no frame within {1.0 / fps:.3f} s of "
                               f"{t:.3f} s (nearest at {at:.3f} s); record the camera at {fps} Hz or more, or "
                               f"convert at a lower --fps")
        if (rgb.shape[1], rgb.shape[0]) != tuple(size):
            rgb = cv2.resize(rgb, tuple(size), interpolation=cv2.INTER_AREA)
        frames.append(rgb)
    return np.array(frames, np.uint8)


def episode_frames(recording: Recording, fps: int, cameras: Sequence[str], size: tuple[int, int]) -> dict:
    times = np.arange(int(np.floor(recording.duration * fps + 1e-9)) + 1) / fps
    frames = {"observation.state": observed(recording, times).astype(np.float32),
              "action": commanded(recording, times).astype(np.float32)}
    for camera in cameras:
        frames[f"observation.images.{camera}"] = images(recording, camera, times, size, fps)
    return frames


def from_mcap(bags: Sequence[str | Path], out: str | Path, task: str, fps: int = 20,
              cameras: Sequence[str] = (), image_size: tuple[int, int] = (128, 96)) -> Path:
    """A dataset of the episode bags, in the order given. Every bag must be of one robot."""
    if not bags:
        raise DatasetError("from-mcap: no episode bag given")
    recordings = [load_episode(bag) for bag in bags]  # EpisodeError names a bag without joint_states or commands
    robot = recordings[0].robot
    others = [r.source for r in recordings if r.robot.name != robot.name]
    if others:
        raise DatasetError(f"from-mcap: {', '.join(others)} are not of {robot.name} (as {recordings[0].source} is); "
                           "expected bags of one robot")
    names = state_names(robot)
    features = {"observation.state": Feature("float32", (len(names),), names),
                "action": Feature("float32", (len(names),), names)}
    width, height = image_size
    for camera in cameras:
        features[f"observation.images.{camera}"] = Feature("video", (height, width, 3))
    # Each bag is checked whole before anything is written: a refused bag leaves no dataset.
    prepared = [episode_frames(r, fps, cameras, image_size) for r in recordings]
    writer = DatasetWriter(out, fps, features, robot.name)
    for recording, frames in zip(recordings, prepared):
        writer.add(Episode(task, frames, {"r2s2r/source": recording.source,
                                          "r2s2r/recorded": str(recording.meta.get("source", ""))}))
    return writer.close()


__all__ = ["from_mcap", "commanded", "observed", "episode_frames"]
