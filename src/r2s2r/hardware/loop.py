"""One control cycle, the same in the driver node and in the in-process evaluation engine:
read the hardware, turn the accepted commands into setpoints, pass them through the safety
filter, write them, and (for the twin) advance the physics.
"""

from __future__ import annotations

import numpy as np

from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware.base import Hardware
from r2s2r.hardware.controller import JointController
from r2s2r.hardware.safety import SafetyFilter, SafetyLimits


class ControlLoop:
    def __init__(self, hardware: Hardware, control_rate_hz: float | None = None,
                 limits: SafetyLimits | None = None):
        self.hardware = hardware
        self.robot = hardware.robot
        self.rate_hz = control_rate_hz or self.robot.control_rate_hz
        self.dt = 1.0 / self.rate_hz
        self.simulated = hasattr(hardware, "advance")
        if self.simulated:
            # The twin steps a whole number of physics steps per control cycle.
            self.steps_per_cycle = max(1, int(round(self.dt / hardware.timestep)))
            self.dt = self.steps_per_cycle * hardware.timestep
        self.limits = limits or SafetyLimits.of(self.robot)
        self.last_sample: JointSample = hardware.read()
        position = self.last_sample.positions_of(self.robot.joint_names)
        self.controller = JointController(self.robot, position, watchdog_s=self.limits.watchdog_s)
        self.safety = SafetyFilter(self.limits, self.dt, position)
        if not self.simulated:  # the twin starts open at home; a real gripper stays as it is
            self.controller.hold_grippers(self.measured_openings())
        self.cycles = 0

    def hold_here(self) -> None:
        """Drop every command and hold the measured position (reset, reconnect, enable)."""
        self.last_sample = self.hardware.read()
        position = self.last_sample.positions_of(self.robot.joint_names)
        self.controller.hold(position)
        self.safety.reset(position)
        self.controller.hold_grippers(self.measured_openings())

    def measured_openings(self) -> np.ndarray:
        """Each gripper's opening as the sum of its finger joints (NaN where not measured)."""
        sample = self.last_sample
        return np.array([sample.positions_of(g.joints).sum() for g in self.robot.grippers])

    def cycle(self) -> None:
        now = self.hardware.now
        if not self.simulated:
            self.last_sample = self.hardware.read()  # raises LinkLost when the robot is gone
        setpoints = self.safety(self.controller.update(now, self.dt))
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

    def sample(self) -> JointSample:
        """The latest joint state: read now from the twin, the last cycle's read on real hardware."""
        if self.simulated:
            self.last_sample = self.hardware.read()
        return self.last_sample

    def positions(self) -> np.ndarray:
        return self.sample().positions_of(self.robot.joint_names)
