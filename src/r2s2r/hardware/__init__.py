"""Hardware backends behind one interface; `SimHardware` is the twin."""

from r2s2r.hardware.base import Hardware, HardwareError, Lifecycle
from r2s2r.hardware.controller import JointController

__all__ = ["Hardware", "HardwareError", "Lifecycle", "JointController"]
