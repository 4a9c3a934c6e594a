"""Replay: rerun one stored trial bit for bit, recording what a camera saw and the trial's topics.

`replay(store, trial_id, out_dir)` reruns the trial with the runner's own code (so its result
must equal the stored one exactly: `Replay.identical` says whether it did) and, through a
TrialObserver that only reads the twin, writes

- `<id>.mp4`: the chosen camera at the policy rate (MPEG-4 Part 2, what OpenCV's bundled
  encoder writes);
- `<id>.mcap`: an MCAP ROS 2 bag of the topics the live graph would carry: /clock,
  /joint_states, the policy's /<group>_position_controller/commands and
  /<gripper>_controller/commands, /cameras/<camera>/image_raw and /twin/object_poses, one
  message each per policy tick.

`moments(spec, camera)` renders a trial's first frame and the frame at the moment it was
judged (its failure, for a failed trial), which reports show for each cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from r2s2r.eval.runner import TrialObserver, TrialResult, TrialSpec, TrialWorker

VIDEO_FOURCC = "mp4v"


class _Camera(TrialObserver):
    """Renders one camera at the start, after every tick (when `every_tick`) and at the end."""

    def __init__(self, camera: str, every_tick: bool):
        self.camera = camera
        self.every_tick = every_tick
        self.renderer = None
        self.first: np.ndarray | None = None
        self.last: np.ndarray | None = None

    def start(self, twin, loop, task) -> None:
        from r2s2r.sim.render import TwinRenderer
        if self.camera not in twin.camera_names:
            raise ValueError(f"camera {self.camera!r} is not in the scene; its cameras are "
                             f"{', '.join(twin.camera_names)}")
        self.renderer = TwinRenderer(twin)
        self.first = self.frame(twin)

    def frame(self, twin) -> np.ndarray:
        self.last = self.renderer.rgb(self.camera)
        return self.last

    def tick(self, twin, loop, observation, command) -> None:
        if self.every_tick:
            self.frame(twin)

    def end(self, twin, outcome) -> None:
        if not self.every_tick:  # otherwise the last tick rendered this very state
            self.frame(twin)
        self.renderer.close()


class _Recorder(_Camera):
    """Video and bag of a replayed trial."""

    def __init__(self, camera: str, video: Path | None, bag: Path | None):
        super().__init__(camera, every_tick=True)
        self.video_path, self.bag_path = video, bag
        self.writer = self.bag = None
        self.frames = 0

    def start(self, twin, loop, task) -> None:
        super().start(twin, loop, task)
        if self.video_path is not None:
            import cv2
            height, width = self.first.shape[:2]
            self.writer = cv2.VideoWriter(str(self.video_path), cv2.VideoWriter_fourcc(*VIDEO_FOURCC),
                                          task.control_rate_hz, (width, height))
            if not self.writer.isOpened():
                raise RuntimeError(f"OpenCV cannot write {self.video_path} ({VIDEO_FOURCC} MP4)")
            self._encode(self.first)
        if self.bag_path is not None:
            from r2s2r.data.mcap_io import BagWriter
            self.bag = BagWriter(self.bag_path)
        self._write(twin, loop, None)

    def frame(self, twin) -> np.ndarray:
        image = super().frame(twin)
        self._encode(image)
        return image

    def _encode(self, image: np.ndarray) -> None:
        if self.writer is not None:
            import cv2
            self.writer.write(cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
            self.frames += 1

    def _write(self, twin, loop, command) -> None:
        if self.bag is None:
            return
        from rosgraph_msgs.msg import Clock

        from r2s2r.contract import Topics, convert
        from r2s2r.contract.frames import WORLD, camera_optical_frame
        now = twin.time
        self.bag.write(Topics.CLOCK, Clock(clock=convert.to_time(now)), now)
        self.bag.write(f"/{Topics.JOINT_STATES}", convert.joint_state_msg(loop.sample()), now)
        if command is not None:
            for group, values in command.joints.items():
                self.bag.write(f"/{Topics.position_commands(group)}", convert.float_array_msg(values, group), now)
            for gripper, opening in command.grippers.items():
                self.bag.write(f"/{Topics.gripper_commands(gripper)}", convert.float_array_msg([opening], gripper), now)
        self.bag.write(f"/{Topics.camera_image(self.camera)}",
                       convert.image_msg(self.last, "rgb8", now, camera_optical_frame(self.camera)), now)
        self.bag.write(f"/{Topics.OBJECT_POSES}",
                       convert.pose_array_msg(list(twin.object_poses().values()), now, WORLD), now)

    def tick(self, twin, loop, observation, command) -> None:
        super().tick(twin, loop, observation, command)
        self._write(twin, loop, command)

    def end(self, twin, outcome) -> None:
        super().end(twin, outcome)
        if self.writer is not None:
            self.writer.release()
        if self.bag is not None:
            self.bag.close()


@dataclass(frozen=True)
class Replay:
    stored: TrialResult
    result: TrialResult
    video: Path | None
    bag: Path | None
    frames: int

    @property
    def identical(self) -> bool:
        """The rerun reproduced the stored trial bit for bit (margins compared with ==)."""
        return self.result.deterministic() == self.stored.deterministic()


def replay(store, trial_id: str, out_dir: str | Path, camera: str = "scene", video: bool = True,
           bag: bool = True) -> Replay:
    """Rerun a stored trial (id or unique prefix) and record it under `out_dir`."""
    stored = store.find(trial_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recorder = _Recorder(camera, out / f"{stored.id}.mp4" if video else None,
                         out / f"{stored.id}.mcap" if bag else None)
    result = TrialWorker().run(stored.spec, recorder)
    return Replay(stored, result, recorder.video_path, recorder.bag_path, recorder.frames)


def moments(spec: TrialSpec, camera: str = "scene", worker: TrialWorker | None = None
            ) -> tuple[np.ndarray, np.ndarray, TrialResult]:
    """(first frame, frame when the trial was judged, the rerun's result) of one trial."""
    observer = _Camera(camera, every_tick=False)
    result = (worker or TrialWorker()).run(spec, observer)
    return observer.first, observer.last, result


__all__ = ["Replay", "replay", "moments", "VIDEO_FOURCC"]
