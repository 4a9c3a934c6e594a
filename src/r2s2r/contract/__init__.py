"""The interface contract: names, frames and value types shared by sim and real.

Importing this package does not import rclpy: cores use the names and value types without a
ROS graph. The ROS-side pieces live in `contract.qos` and `contract.convert`, which only
`nodes/` import.
"""

from r2s2r.contract.names import Topics, Services
from r2s2r.contract.sync import ApproximateTimeSynchronizer, SyncedObservation
from r2s2r.contract.types import (CameraFrame, CommandError, JointCommand, JointNamesError, JointSample,
                                  StaleCommandError)

__all__ = ["Topics", "Services", "CameraFrame", "JointCommand", "JointSample", "CommandError",
           "JointNamesError", "StaleCommandError",
           "ApproximateTimeSynchronizer", "SyncedObservation"]
