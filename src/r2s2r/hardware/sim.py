"""SimHardware: the MuJoCo twin behind the Hardware interface."""

from __future__ import annotations

import numpy as np

from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware.base import Hardware, Lifecycle
from r2s2r.sim.scene import Scene
from r2s2r.sim.servo import twin_command_limits
from r2s2r.sim.twin import Twin


class SimHardware(Hardware):
    backend = "sim"
    simulated = True

    def __init__(self, scene: Scene, seed: int | None = None):
        from r2s2r.robots import get_robot
        super().__init__(get_robot(scene.robot))
        self.scene = scene
        self.seed = seed
        self.twin: Twin | None = None
        self._compiled: Twin | None = None  # from_twin's: on_configure() resets it instead of compiling

    @classmethod
    def from_twin(cls, twin: Twin, seed: int | None = None, reset: bool = True) -> "SimHardware":
        """SimHardware around a twin compiled already (a worker's cached one, a cell with its
        own model edits): on_configure() resets it from `seed` instead of compiling the scene
        again, or, with `reset=False`, takes it in the state it is in (a scene being validated)."""
        hardware = cls(twin.scene, seed)
        hardware._compiled = twin
        hardware._reset_on_configure = reset
        return hardware

    def on_configure(self) -> None:
        if self._compiled is not None:
            self.twin = self._compiled
            if self._reset_on_configure:
                self.twin.reset(self.seed)
        else:
            self.twin = Twin(self.scene, seed=self.seed)
        self.state = Lifecycle.INACTIVE

    def command_limits(self, limits):
        """What the twin's servos can follow (sim.servo.twin_command_limits): a servo driven past
        what its torque allows falls behind, then overshoots."""
        return twin_command_limits(self.robot, self.twin.model, limits)

    def read(self) -> JointSample:
        return self.twin.joint_sample()

    def write(self, command: JointCommand, gripper_openings, gripper_forces=None) -> None:
        self.twin.set_arm_targets(command.position)
        self._grippers(gripper_openings, gripper_forces)

    def _grippers(self, openings, forces) -> None:
        if len(openings):
            self.twin.set_gripper_openings(np.asarray(openings, float))
            self.twin.set_gripper_forces(forces)

    def advance(self, steps: int = 1) -> None:
        """Step the physics; only the twin has a clock we drive."""
        self.twin.step(steps)

    def advance_through(self, setpoints: np.ndarray, gripper_openings, steps_per_row: int,
                        gripper_forces=None) -> None:
        """Write each row of `setpoints` in turn and step the physics `steps_per_row` times after each
        (what write() + advance() once per control cycle do, for many cycles at once)."""
        self._grippers(gripper_openings, gripper_forces)
        self.twin.step_through(setpoints, steps_per_row)

    def camera_effects(self, camera: str, rgb: np.ndarray) -> np.ndarray:
        """The image as the cell's camera delivers it (a proxy cell's adds noise, blur, tints)."""
        return rgb

    def calibrated_view(self):
        """The model and data whose cameras /tf_static publishes: where the calibration puts them
        (the twin's own here; a proxy cell's cameras are rendered a little off it)."""
        return self.twin

    @property
    def now(self) -> float:
        return self.twin.time if self.twin is not None else float("nan")  # nan: not connected

    @property
    def timestep(self) -> float:
        return self.twin.timestep

    def reset(self) -> None:
        self.twin.reset()

    def on_cleanup(self) -> None:
        self.twin = None
        self.state = Lifecycle.FINALIZED
