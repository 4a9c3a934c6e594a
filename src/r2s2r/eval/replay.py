"""Replay: rerun one stored trial bit for bit and watch it through a camera.

A trial rerun with the runner's own code must equal the stored result exactly
(`Replay.identical` says whether it did). The observers here only read the twin:

- `CameraObserver` renders one camera at the start, after every tick (or only at the end);
- `VideoRecorder` also encodes what it renders into an MP4 (MPEG-4 Part 2, what OpenCV's
  bundled encoder writes) at the policy rate.

`moments(spec, camera)` renders a trial's first frame and the frame at the moment it was
judged (its failure, for a failed trial), which reports show for each cluster. `r2s2r replay`,
which also writes the trial's topics as an MCAP bag, is data.trial_bag.replay (bags are the
data layer's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from r2s2r.eval.runner import TrialObserver, TrialResult, TrialSpec, TrialWorker

VIDEO_FOURCC = "mp4v"


class CameraObserver(TrialObserver):
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


class VideoRecorder(CameraObserver):
    """A camera observer that encodes every frame into an MP4 at `path` (None: render only)."""

    def __init__(self, camera: str, path: Path | None):
        super().__init__(camera, every_tick=True)
        self.path = path
        self.writer = None
        self.frames = 0

    def start(self, twin, loop, task) -> None:
        super().start(twin, loop, task)
        if self.path is not None:
            import cv2
            height, width = self.first.shape[:2]
            self.writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*VIDEO_FOURCC),
                                          task.control_rate_hz, (width, height))
            if not self.writer.isOpened():
                raise RuntimeError(f"OpenCV cannot write {self.path} ({VIDEO_FOURCC} MP4)")
            self._encode(self.first)

    def frame(self, twin) -> np.ndarray:
        image = super().frame(twin)
        self._encode(image)
        return image

    def _encode(self, image: np.ndarray) -> None:
        if self.writer is not None:
            import cv2
            self.writer.write(cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
            self.frames += 1

    def end(self, twin, outcome) -> None:
        super().end(twin, outcome)
        if self.writer is not None:
            self.writer.release()


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


def moments(spec: TrialSpec, camera: str = "scene", worker: TrialWorker | None = None
            ) -> tuple[np.ndarray, np.ndarray, TrialResult]:
    """(first frame, frame when the trial was judged, the rerun's result) of one trial."""
    observer = CameraObserver(camera, every_tick=False)
    result = (worker or TrialWorker()).run(spec, observer)
    return observer.first, observer.last, result


__all__ = ["Replay", "moments", "CameraObserver", "VideoRecorder", "VIDEO_FOURCC"]
