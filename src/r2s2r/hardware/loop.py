"""One control cycle, the same in the driver node and in the in-process evaluation engine:
read the hardware, turn the accepted commands into setpoints, write them, and (for the twin)
advance the physics.
"""

from __future__ import annotations

import numpy as np

from r2s2r.contract.types import JointCommand
from r2s2r.hardware.base import Hardware
from r2s2r.hardware.controller import JointController


class ControlLoop:
    def __init__(self, hardware: Hardware, control_rate_hz: float | None = None):
        self.hardware = hardware
        self.robot = hardware.robot
        self.rate_hz = control_rate_hz or self.robot.control_rate_hz
        self.dt = 1.0 / self.rate_hz
        self.simulated = hasattr(hardware, "advance")
        if self.simulated:
            # The twin steps a whole number of physics steps per control cycle.
            self.steps_per_cycle = max(1, int(round(self.dt / hardware.timestep)))
            self.dt = self.steps_per_cycle * hardware.timestep
        sample = hardware.read()
        self.controller = JointController(self.robot, sample.positions_of(self.robot.joint_names))
        self.enabled = True
        self.cycles = 0

    def hold_here(self) -> None:
        """Hold the measured position (after a reset, an estop or a fault)."""
        sample = self.hardware.read()
        self.controller.hold(sample.positions_of(self.robot.joint_names))

    def cycle(self) -> None:
        now = self.hardware.now
        setpoints = self.controller.update(now, self.dt)
        self.hardware.write(JointCommand(self.robot.joint_names, setpoints, stamp=now),
                            self.controller.gripper_openings())
        if self.simulated:
            self.hardware.advance(self.steps_per_cycle)
        self.cycles += 1

    def run_until(self, time: float) -> int:
        """Cycle until the hardware clock reaches `time` (sim: as fast as the CPU allows)."""
        n = 0
        while self.hardware.now + 1e-9 < time:
            self.cycle()
            n += 1
        return n

    def positions(self) -> np.ndarray:
        return self.hardware.read().positions_of(self.robot.joint_names)
