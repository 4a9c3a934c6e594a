"""Hand-eye calibration: where a camera sits relative to the robot, from robot poses and board views.

eye_in_hand: the camera rides on a robot link and looks at a board fixed in the cell; the
result is the camera's pose in that link's frame. eye_to_hand: the camera is fixed and looks
at a board carried by the link; the result is the camera's pose in the robot's base frame.

Every one of OpenCV's hand-eye methods (Tsai, Park, Horaud, Andreff, Daniilidis) is solved;
the one whose answer keeps the board most still across the samples seeds a joint refinement
of the camera's and the board's poses that minimises the reprojection error of every corner in
every image (the linear methods weigh a far, foreshortened view as much as a good one). The
spread between the methods is reported as a check on the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np
import yaml

from r2s2r.camera.board import MAX_EDGE_WIDTH_PX, Board, BoardNotFound
from r2s2r.camera.calibration import CalibrationError, board_pose_from_detection
from r2s2r.camera.geometry import (MUJOCO_TO_OPTICAL, difference, invert, matrix_to_quat, pose_matrix,
                                   rotation_angle, transform)
from r2s2r.camera.info import CameraCalibration
from r2s2r.config import ConfigError, Section, load_yaml

SETUPS = ("eye_in_hand", "eye_to_hand")
METHODS = {"tsai": cv2.CALIB_HAND_EYE_TSAI, "park": cv2.CALIB_HAND_EYE_PARK,
           "horaud": cv2.CALIB_HAND_EYE_HORAUD, "andreff": cv2.CALIB_HAND_EYE_ANDREFF,
           "daniilidis": cv2.CALIB_HAND_EYE_DANIILIDIS}
MIN_SAMPLES = 5


@dataclass(frozen=True)
class Sample:
    name: str  # the image's file name
    image: np.ndarray
    T_base_link: np.ndarray  # the link's pose in the robot base frame


@dataclass(frozen=True)
class Recording:
    """A recorded hand-eye session: the link whose poses were logged, in which base frame."""

    base: str
    link: str
    samples: tuple[Sample, ...]
    rejected: dict[str, str] = field(default_factory=dict)  # image -> why it could not be read


@dataclass(frozen=True)
class MethodResult:
    T: np.ndarray  # the camera's optical frame in the parent frame
    residual_m: float  # how far the board seems to move between samples (RMS, metres)
    residual_rad: float  # ... and turn (RMS, radians)


@dataclass(frozen=True)
class HandEyeResult:
    setup: str
    parent: str  # the frame T is in: the link (eye_in_hand) or the base (eye_to_hand)
    method: str  # the linear method that seeded the refinement
    T_parent_camera: np.ndarray  # the camera's optical frame in `parent`, refined
    T_board: np.ndarray  # the board in the base (eye_in_hand) or in the link (eye_to_hand), refined
    rms_px: float  # reprojection error of every corner after refinement
    methods: dict[str, MethodResult]
    spread_m: float  # largest distance between the linear methods' answers and the refined one
    spread_rad: float  # largest angle between them
    used: tuple[str, ...]
    rejected: dict[str, str]

    def mujoco_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """(pos, quat [w, x, y, z]) of the camera as a MuJoCo camera (looking along -z) in `parent`."""
        rotation = self.T_parent_camera[:3, :3] @ MUJOCO_TO_OPTICAL
        return self.T_parent_camera[:3, 3].copy(), matrix_to_quat(rotation)


def load_recording(path: str | Path) -> Recording:
    """A samples YAML: `base` and `link` frame names and `samples`, each an image file (relative to
    the YAML's folder) with the link's pose in the base frame as pos [x, y, z] (metres) and
    quat [w, x, y, z]."""
    path = Path(path)
    top = Section(load_yaml(path), str(path))
    top.reject_unknown({"base", "link", "samples"})
    samples, rejected = [], {}
    for sec in top.sections("samples"):
        sec.reject_unknown({"image", "pos", "quat"})
        name = sec.string("image")
        quat = sec.vector("quat", 4)
        if abs(np.linalg.norm(quat) - 1.0) > 1e-3:
            raise sec.error("quat", "a unit quaternion [w, x, y, z]", list(quat))
        image = cv2.imread(str(path.parent / name), cv2.IMREAD_COLOR)
        if image is None:
            rejected[name] = "not an image OpenCV can read"
            continue
        samples.append(Sample(name, image, pose_matrix(sec.vector("pos", 3), quat)))
    if not samples and not rejected:
        raise top.error("samples", "a list of {image, pos, quat} entries")
    return Recording(top.string("base"), top.string("link"), tuple(samples), rejected)


def _mean_pose(Ts: Sequence[np.ndarray]) -> np.ndarray:
    """The mean position and the chordal mean rotation of a set of transforms."""
    u, _, vt = np.linalg.svd(sum(t[:3, :3] for t in Ts))
    return transform(u @ np.diag([1.0, 1.0, np.linalg.det(u @ vt)]) @ vt, np.mean([t[:3, 3] for t in Ts], axis=0))


def _consistency(Ts: Sequence[np.ndarray]) -> tuple[float, float]:
    """RMS distance and angle of a set of transforms from their mean: zero when they all agree."""
    mean = _mean_pose(Ts)
    distance = float(np.sqrt(np.mean([np.sum((t[:3, 3] - mean[:3, 3]) ** 2) for t in Ts])))
    angle = float(np.sqrt(np.mean([rotation_angle(mean[:3, :3].T @ t[:3, :3]) ** 2 for t in Ts])))
    return distance, angle


def _perturb(t: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return t @ transform(cv2.Rodrigues(delta[:3].reshape(3, 1))[0], delta[3:])


def _refine(moving, detections, calibration: CameraCalibration, X: np.ndarray, Y: np.ndarray,
            iterations: int = 30) -> tuple[np.ndarray, np.ndarray, float]:
    """Levenberg-Marquardt on (X, Y), where the board in camera i is inv(X) inv(moving_i) Y."""
    inverse_moving = [invert(m) for m in moving]
    k, d = calibration.K, calibration.D

    def residuals(x, y):
        out = []
        for m_inv, det in zip(inverse_moving, detections):
            t = invert(x) @ m_inv @ y
            rvec = cv2.Rodrigues(t[:3, :3])[0]
            projected, _ = cv2.projectPoints(det.object_points, rvec, t[:3, 3], k, d)
            out.append((projected.reshape(-1, 2) - det.image_points).ravel())
        return np.concatenate(out)

    r = residuals(X, Y)
    damping, step = 1e-3, 1e-6
    for _ in range(iterations):
        jacobian = np.empty((r.size, 12))
        for j in range(12):
            delta = np.zeros(12)
            delta[j] = step
            jacobian[:, j] = (residuals(_perturb(X, delta[:6]), _perturb(Y, delta[6:])) - r) / step
        normal, gradient = jacobian.T @ jacobian, jacobian.T @ r
        while True:
            delta = -np.linalg.solve(normal + damping * np.diag(np.diag(normal)), gradient)
            X_new, Y_new = _perturb(X, delta[:6]), _perturb(Y, delta[6:])
            r_new = residuals(X_new, Y_new)
            if r_new @ r_new < r @ r:
                X, Y, r, damping = X_new, Y_new, r_new, max(damping / 10, 1e-9)
                break
            damping *= 10
            if damping > 1e6:
                break
        if damping > 1e6 or np.linalg.norm(delta) < 1e-10:
            break
    return X, Y, float(np.sqrt(np.mean(r.reshape(-1, 2) ** 2) * 2))


def calibrate_handeye(recording: Recording, board: Board, calibration: CameraCalibration, setup: str,
                      min_samples: int = MIN_SAMPLES, max_edge_width: float = MAX_EDGE_WIDTH_PX) -> HandEyeResult:
    if setup not in SETUPS:
        raise CalibrationError(f"hand-eye setup {setup!r}; expected one of {', '.join(SETUPS)}")
    rejected = dict(recording.rejected)
    T_link, T_board, detections = [], [], []  # the link in the base, the board in the camera
    used = []
    for sample in recording.samples:
        try:
            detection = board.detect(sample.image, max_edge_width)
        except BoardNotFound as exc:
            rejected[sample.name] = str(exc)
            continue
        used.append(sample.name)
        T_link.append(sample.T_base_link)
        T_board.append(board_pose_from_detection(detection, board, calibration).T_camera_board)
        detections.append(detection)
    if len(used) < min_samples:
        reasons = "".join(f"\n  {name}: {reason}" for name, reason in sorted(rejected.items())) or " none"
        raise CalibrationError(f"{len(used)} usable hand-eye samples, at least {min_samples} needed; skipped:{reasons}")
    # OpenCV solves for the camera in the gripper given gripper-in-base poses; for a fixed camera,
    # handing it base-in-gripper poses makes the answer the camera in the base instead.
    moving = T_link if setup == "eye_in_hand" else [invert(t) for t in T_link]
    distance = float(np.median([np.linalg.norm(t[:3, 3]) for t in T_board]))
    methods = {}
    for name, flag in METHODS.items():
        try:
            rotation, translation = cv2.calibrateHandEye([t[:3, :3] for t in moving], [t[:3, 3] for t in moving],
                                                         [t[:3, :3] for t in T_board], [t[:3, 3] for t in T_board],
                                                         method=flag)
        except cv2.error:
            continue  # this method failed on these motions; the others may not
        X = transform(rotation, translation)
        if not np.all(np.isfinite(X)):
            continue
        # The board must come out in the same place from every sample: in the base for a fixed
        # board, in the link for a carried one.
        boards = [m @ X @ b for m, b in zip(moving, T_board)]
        methods[name] = MethodResult(X, *_consistency(boards))
    if not methods:
        raise CalibrationError("no hand-eye method found a solution; the robot poses may not vary enough "
                               "(rotate the link about at least two different axes between samples)")
    # Weigh turning by the viewing distance: an angle error moves the board by about that much.
    method = min(methods, key=lambda n: methods[n].residual_m + methods[n].residual_rad * distance)
    seed = methods[method].T
    board_seed = _mean_pose([m @ seed @ b for m, b in zip(moving, T_board)])
    X, Y, rms = _refine(moving, detections, calibration, seed, board_seed)
    spreads = [difference(X, r.T) for r in methods.values()]
    return HandEyeResult(setup=setup, parent=recording.link if setup == "eye_in_hand" else recording.base,
                         method=method, T_parent_camera=X, T_board=Y, rms_px=rms, methods=methods,
                         spread_m=max(s[0] for s in spreads), spread_rad=max(s[1] for s in spreads),
                         used=tuple(used), rejected=rejected)


def _flow(values) -> list[float]:
    return [float(f"{v:.9g}") for v in values]


def write_extrinsics(path: str | Path, camera: str, result: HandEyeResult) -> Path:
    """Record the camera's pose in a camera-extrinsics YAML (the file a scene names in
    `camera_extrinsics`), keeping the other cameras already in it."""
    path = Path(path)
    cameras = []
    if path.exists():
        top = Section(load_yaml(path), str(path))
        top.reject_unknown({"cameras"})
        cameras = [s.data for s in top.sections("cameras") if s.data.get("name") != camera]
    pos, quat = result.mujoco_pose()
    cameras.append({"name": camera, "parent": result.parent, "pos": _flow(pos), "quat": _flow(quat)})
    header = ("# Camera poses from `r2s2r calibrate handeye`. A scene YAML names this file in\n"
              "# `camera_extrinsics`; each pose is the MuJoCo camera frame (looking along -z, y up) in\n"
              "# `parent`, a robot link; the optical frame is that turned half a turn about x.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump({"cameras": cameras}, sort_keys=False, default_flow_style=None))
    return path


__all__ = ["SETUPS", "METHODS", "Sample", "Recording", "HandEyeResult", "MethodResult", "load_recording",
           "calibrate_handeye", "write_extrinsics", "ConfigError", "MIN_SAMPLES"]
