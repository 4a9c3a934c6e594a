"""`r2s2r replay`: rerun one stored trial bit for bit, recording an MP4 from a camera and an
MCAP ROS 2 bag of the topics the live graph would carry.

The bag has /clock, /joint_states, the policy's /<group>_position_controller/commands and
/<gripper>_controller/commands, /cameras/<camera>/image_raw and /twin/object_poses, one message
each per policy tick, written by `data.mcap_io.BagWriter` (so `ros2 bag`, rosbags and Foxglove
read it); the messages are built by the contract's conversions.
"""

from __future__ import annotations

from pathlib import Path

from r2s2r.contract import Topics, convert
from r2s2r.contract.frames import WORLD, camera_optical_frame
from r2s2r.data.mcap_io import BagWriter
from r2s2r.eval.replay import Replay, VideoRecorder
from r2s2r.eval.runner import TrialWorker


class TrialBag(VideoRecorder):
    """A video recorder that also writes each tick's topics into an MCAP bag at `bag_path`."""

    def __init__(self, camera: str, video_path: Path | None, bag_path: Path | None):
        super().__init__(camera, video_path)
        self.bag_path = bag_path
        self.bag: BagWriter | None = None

    def start(self, twin, loop, task) -> None:
        super().start(twin, loop, task)
        if self.bag_path is not None:
            self.bag = BagWriter(self.bag_path)
        self._write(twin, loop, None)

    def tick(self, twin, loop, observation, command) -> None:
        super().tick(twin, loop, observation, command)
        self._write(twin, loop, command)

    def end(self, twin, outcome) -> None:
        super().end(twin, outcome)
        if self.bag is not None:
            self.bag.close()

    def _write(self, twin, loop, command) -> None:
        if self.bag is None:
            return
        now = twin.time
        self.bag.write(Topics.CLOCK, convert.clock_msg(now), now)
        self.bag.write(f"/{Topics.JOINT_STATES}", convert.joint_state_msg(loop.sample()), now)
        if command is not None:
            for group, values in command.joints.items():
                self.bag.write(f"/{Topics.streaming_commands(group)}", convert.float_array_msg(values, group), now)
            for gripper, opening in command.grippers.items():
                self.bag.write(f"/{Topics.gripper_commands(gripper)}", convert.float_array_msg([opening], gripper), now)
        self.bag.write(f"/{Topics.camera_image(self.camera)}",
                       convert.image_msg(self.last, "rgb8", now, camera_optical_frame(self.camera)), now)
        self.bag.write(f"/{Topics.OBJECT_POSES}",
                       convert.pose_array_msg(list(twin.object_poses().values()), now, WORLD), now)


def replay(store, trial_id: str, out_dir: str | Path, camera: str = "scene", video: bool = True,
           bag: bool = True) -> Replay:
    """Rerun a stored trial (id or unique prefix) and record it under `out_dir` as <id>.mp4 / <id>.mcap."""
    stored = store.find(trial_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recorder = TrialBag(camera, out / f"{stored.id}.mp4" if video else None, out / f"{stored.id}.mcap" if bag else None)
    result = TrialWorker().run(stored.spec, recorder)
    return Replay(stored, result, recorder.path, recorder.bag_path, recorder.frames)


__all__ = ["TrialBag", "replay"]
