"""Intrinsic calibration from board images, and a board's pose from one image (OpenCV)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

from r2s2r.camera.board import MAX_EDGE_WIDTH_PX, Board, BoardDetection, BoardNotFound
from r2s2r.camera.geometry import transform
from r2s2r.camera.info import INTRINSICS_EXPECTED, CameraCalibration

MIN_IMAGES = 5
# Radial coefficients to fit -> (OpenCV flags, ROS distortion model).
K_COEFFICIENTS = {2: (cv2.CALIB_FIX_K3, "plumb_bob"), 3: (0, "plumb_bob"),
                  6: (cv2.CALIB_RATIONAL_MODEL, "rational_polynomial")}


class CalibrationError(ValueError):
    """Calibration could not run on what it was given; the message says what was missing."""


@dataclass(frozen=True)
class IntrinsicsResult:
    calibration: CameraCalibration
    rms: float  # reprojection error over every corner of every used image, pixels
    per_image_rms: dict[str, float]  # used image -> its reprojection error, pixels
    board_poses: dict[str, np.ndarray]  # used image -> T_camera_board (4x4)
    rejected: dict[str, str] = field(default_factory=dict)  # image -> why it was skipped

    @property
    def used(self) -> tuple[str, ...]:
        return tuple(self.per_image_rms)


def read_images(folder: str | Path) -> tuple[list[tuple[str, np.ndarray]], dict[str, str]]:
    """Every file of a folder (sorted by name) that OpenCV reads as an image; the rest with a reason."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CalibrationError(f"{folder} is not a folder of images")
    images, rejected = [], {}
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            rejected[path.name] = "not an image OpenCV can read"
        else:
            images.append((path.name, image))
    return images, rejected


def detect_all(images: Sequence[tuple[str, np.ndarray]], board: Board, max_edge_width: float = MAX_EDGE_WIDTH_PX
               ) -> tuple[dict[str, BoardDetection], dict[str, str]]:
    """Board detections by image name, and the images without a usable view with the reason;
    images whose size differs from the first image's are rejected too."""
    detections, rejected = {}, {}
    size = None
    for name, image in images:
        shape = (image.shape[1], image.shape[0])
        if size is not None and shape != size:
            rejected[name] = f"image is {shape[0]}x{shape[1]}, the others {size[0]}x{size[1]}"
            continue
        try:
            detections[name] = board.detect(image, max_edge_width)
            size = shape
        except BoardNotFound as exc:
            rejected[name] = str(exc)
    return detections, rejected


def calibrate_intrinsics(images: str | Path | Sequence[tuple[str, np.ndarray]], board: Board,
                         min_images: int = MIN_IMAGES, k_coefficients: int = 2, camera_name: str = "camera",
                         max_edge_width: float = MAX_EDGE_WIDTH_PX) -> IntrinsicsResult:
    """Calibrate a camera from board views: a folder of image files or (name, image) pairs.

    Unusable images are skipped and listed in `rejected`; fewer than `min_images` usable views
    is a CalibrationError naming every image and why it was skipped.
    """
    if k_coefficients not in K_COEFFICIENTS:
        raise CalibrationError(f"k_coefficients {k_coefficients}; expected one of {', '.join(map(str, K_COEFFICIENTS))}")
    where = str(images) if isinstance(images, (str, Path)) else f"{len(images)} images"
    rejected = {}
    if isinstance(images, (str, Path)):
        images, rejected = read_images(images)
    detections, skipped = detect_all(images, board, max_edge_width)
    rejected.update(skipped)
    if len(detections) < min_images:
        reasons = "".join(f"\n  {name}: {reason}" for name, reason in sorted(rejected.items())) or " none"
        raise CalibrationError(f"{len(detections)} usable board views in {where}, at least {min_images} needed "
                               f"(a {board.kind} of {board.cols} x {board.rows}); skipped:{reasons}")
    names = list(detections)
    size = detections[names[0]].image_size
    flags, model = K_COEFFICIENTS[k_coefficients]
    try:
        rms, k, d, rvecs, tvecs = cv2.calibrateCamera(
            [detections[n].object_points for n in names], [detections[n].image_points for n in names], size,
            None, None, flags=flags,
            criteria=(cv2.TERM_CRITERIA_COUNT + cv2.TERM_CRITERIA_EPS, 100, 1e-12))
    except cv2.error as exc:  # degenerate views (all from one angle, say)
        raise CalibrationError(f"OpenCV could not calibrate from {len(names)} views of {where}: {exc.err}; "
                               "take views from varied angles and distances") from None
    d = d.reshape(-1)[: 8 if model == "rational_polynomial" else 5]
    calibration = CameraCalibration(size[0], size[1], k, d, np.eye(3), np.hstack([k, np.zeros((3, 1))]), model,
                                    camera_name)
    per_image, poses = {}, {}
    for name, rvec, tvec in zip(names, rvecs, tvecs):
        det = detections[name]
        projected, _ = cv2.projectPoints(det.object_points, rvec, tvec, k, d)
        per_image[name] = float(np.sqrt(np.mean(np.sum((projected.reshape(-1, 2) - det.image_points) ** 2, axis=1))))
        poses[name] = transform(cv2.Rodrigues(rvec)[0], tvec)
    return IntrinsicsResult(calibration, float(rms), per_image, poses, rejected)


@dataclass(frozen=True)
class BoardPose:
    T_camera_board: np.ndarray  # 4x4: board frame -> camera optical frame
    rms: float  # reprojection error, pixels
    corners: int


def board_pose_from_detection(detection: BoardDetection, board: Board, calibration: CameraCalibration) -> BoardPose:
    if not board.oriented:
        sx, sy = board.squares
        raise CalibrationError(f"a chessboard of {sx} x {sy} squares looks the same turned half a turn, so its "
                               "pose is ambiguous; use one with an odd and an even number of squares, or ChArUco")
    if not calibration.calibrated:
        raise CalibrationError(f"the camera's calibration has {calibration.intrinsics_problem()}; expected "
                               f"{INTRINSICS_EXPECTED} (calibrate its intrinsics first)")
    if detection.image_size != (calibration.width, calibration.height):
        raise CalibrationError(f"image is {detection.image_size[0]}x{detection.image_size[1]}, the calibration is for "
                               f"{calibration.width}x{calibration.height}")
    obj, img = detection.object_points, detection.image_points
    k, d = calibration.K, calibration.D
    # IPPE solves planar targets in closed form; Levenberg-Marquardt then polishes the pose.
    ok, rvec, tvec = cv2.solvePnP(obj, img, k, d, flags=cv2.SOLVEPNP_IPPE)
    if not ok:
        raise CalibrationError("solvePnP found no board pose")
    rvec, tvec = cv2.solvePnPRefineLM(obj, img, k, d, rvec, tvec)
    projected, _ = cv2.projectPoints(obj, rvec, tvec, k, d)
    rms = float(np.sqrt(np.mean(np.sum((projected.reshape(-1, 2) - img) ** 2, axis=1))))
    return BoardPose(transform(cv2.Rodrigues(rvec)[0], tvec), rms, len(obj))


def board_pose(image: np.ndarray, board: Board, calibration: CameraCalibration,
               max_edge_width: float = MAX_EDGE_WIDTH_PX) -> BoardPose:
    """The board's pose in the camera's optical frame from one image (solvePnP)."""
    return board_pose_from_detection(board.detect(image, max_edge_width), board, calibration)


__all__ = ["CalibrationError", "IntrinsicsResult", "BoardPose", "calibrate_intrinsics", "board_pose",
           "board_pose_from_detection", "read_images", "detect_all", "MIN_IMAGES", "K_COEFFICIENTS"]
