"""Cameras: frame sources, ingestion with bounded buffering and reconnection, camera_info YAML,
intrinsic and hand-eye calibration. No ROS here: nodes/camera_node.py publishes what this makes.
"""

from r2s2r.camera.board import Board, BoardDetection, BoardNotFound, add_board_to_spec
from r2s2r.camera.calibration import CalibrationError, board_pose, calibrate_intrinsics
from r2s2r.camera.config import CameraConfig, load_camera_config, make_source
from r2s2r.camera.handeye import calibrate_handeye, load_recording, write_extrinsics
from r2s2r.camera.info import CameraCalibration, read_calibration, write_calibration
from r2s2r.camera.sources import Capture, EndOfStream, FrameSource, SourceError
from r2s2r.camera.stream import CameraStream, LatestFrame

__all__ = ["Board", "BoardDetection", "BoardNotFound", "add_board_to_spec", "CalibrationError", "board_pose",
           "calibrate_intrinsics", "CameraConfig", "load_camera_config", "make_source", "calibrate_handeye",
           "load_recording", "write_extrinsics", "CameraCalibration", "read_calibration", "write_calibration",
           "Capture", "EndOfStream", "FrameSource", "SourceError", "CameraStream", "LatestFrame"]
