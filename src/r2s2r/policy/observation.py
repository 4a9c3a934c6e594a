"""Observation assembly: joint states and camera images, synchronised, into one Observation.

Joint positions are picked per group by joint name (the RobotSpec's groups); a gripper's
opening is the sum of its finger joints' positions, as the driver commands it. Images are
matched to the joint state by the contract's approximate-time synchroniser; staleness is the
runtime's to judge, from the observation's stamp (its oldest part).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from r2s2r.contract.names import Topics
from r2s2r.contract.sync import ApproximateTimeSynchronizer
from r2s2r.contract.types import JointSample
from r2s2r.policy.types import ActionSpace, Observation, ObservationSpace, PolicyError

JOINTS = Topics.JOINT_STATES  # the synchroniser's key for joint states


@dataclass(frozen=True)
class JointLayout:
    """Joint names per group and finger joints per gripper, in the robot's order."""

    groups: dict[str, tuple[str, ...]]
    grippers: dict[str, tuple[str, ...]]

    @classmethod
    def from_robot(cls, robot) -> "JointLayout":
        return cls({g.name: tuple(g.joints) for g in robot.groups},
                   {g.name: tuple(g.joints) for g in robot.grippers})

    def check(self, space: ActionSpace) -> None:
        """That what a policy observes or commands (an ObservationSpace or ActionSpace) is the robot's."""
        verb = "observes" if isinstance(space, ObservationSpace) else "commands"
        for group, n in space.joints.items():
            if group not in self.groups:
                raise PolicyError(f"the policy {verb} joint group {group!r}; the robot's groups are "
                                  f"{', '.join(self.groups)}")
            if len(self.groups[group]) != n:
                raise PolicyError(f"the policy {verb} {n} joints in group {group!r}; the robot has "
                                  f"{len(self.groups[group])} ({', '.join(self.groups[group])})")
        unknown = [g for g in space.grippers if g not in self.grippers]
        if unknown:
            raise PolicyError(f"the policy {verb} grippers {unknown}; the robot's grippers are "
                              f"{', '.join(self.grippers) or 'none'}")

    def split(self, sample: JointSample) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        index = {name: i for i, name in enumerate(sample.names)}
        missing = [j for names in (*self.groups.values(), *self.grippers.values()) for j in names if j not in index]
        if missing:
            raise PolicyError(f"joint_states lacks joints {missing}; expected every joint of the robot")
        bad = [f"{j}={sample.position[index[j]]}" for names in (*self.groups.values(), *self.grippers.values())
               for j in names if not np.isfinite(sample.position[index[j]])]
        if bad:  # a NaN state would become a NaN observation, and the held command a NaN target
            raise PolicyError(f"joint_states has positions {', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''}; "
                              "expected finite positions of every joint of the robot")
        joints = {g: sample.position[[index[j] for j in names]].copy() for g, names in self.groups.items()}
        grippers = {g: float(sum(sample.position[index[j]] for j in names)) for g, names in self.grippers.items()}
        return joints, grippers


class ObservationAssembler:
    """Feed it joint samples and images as they arrive (any thread); `latest()` gives the newest
    synchronised set as an Observation, or None until every part has arrived."""

    def __init__(self, space: ObservationSpace, layout: JointLayout, tolerance_s: float = 0.05,
                 task: str | None = None):
        layout.check(space)
        self.space = space
        self.layout = layout
        self.task = task
        self.sync = ApproximateTimeSynchronizer([JOINTS, *space.cameras], tolerance_s)
        self._lock = threading.Lock()

    @property
    def dropped(self) -> int:
        return self.sync.dropped

    def add_joints(self, sample: JointSample) -> None:
        value = self.layout.split(sample)
        with self._lock:
            self.sync.add(JOINTS, sample.stamp, value)

    def add_image(self, camera: str, stamp: float, image: np.ndarray) -> None:
        if camera not in self.space.cameras:
            raise PolicyError(f"camera {camera!r} is not observed; the policy's cameras are "
                              f"{', '.join(self.space.cameras) or 'none'}")
        with self._lock:
            self.sync.add(camera, stamp, image)

    def clear(self) -> None:
        """Forget what has arrived: the next observation is formed from what arrives after."""
        with self._lock:
            self.sync.clear()

    def latest(self) -> Observation | None:
        with self._lock:
            synced = self.sync.latest()
        if synced is None:
            return None
        _, (joints, grippers) = synced.items[JOINTS]
        images = {camera: synced.items[camera][1] for camera in self.space.cameras}
        stamp = min(stamp for stamp, _ in synced.items.values())
        return Observation(stamp, joints, grippers, images, self.task)
