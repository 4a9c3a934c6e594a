"""`r2s2r calibrate intrinsics` and `r2s2r calibrate handeye`.

Each command returns an exit code; bad input raises ConfigError or ValueError (CalibrationError
is one) with a message that names what is wrong, which the `r2s2r` command prints.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from r2s2r.camera.board import KINDS, MAX_EDGE_WIDTH_PX, Board
from r2s2r.camera.calibration import K_COEFFICIENTS, MIN_IMAGES, calibrate_intrinsics
from r2s2r.camera.handeye import MIN_SAMPLES, calibrate_handeye, load_recording, write_extrinsics
from r2s2r.camera.info import read_calibration, write_calibration


def _board_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--board", choices=KINDS, required=True)
    parser.add_argument("--cols", type=int, required=True,
                        help="inner corners across (chessboard) or squares across (charuco)")
    parser.add_argument("--rows", type=int, required=True,
                        help="inner corners down (chessboard) or squares down (charuco)")
    parser.add_argument("--square", type=float, required=True, metavar="METRES", help="side of one square")
    parser.add_argument("--marker", type=float, metavar="METRES",
                        help="charuco: side of one marker (default three quarters of a square)")
    parser.add_argument("--dictionary", default="DICT_4X4_50", help="charuco: ArUco dictionary (default %(default)s)")
    parser.add_argument("--max-blur", type=float, default=MAX_EDGE_WIDTH_PX, metavar="PX",
                        help="reject chessboard views whose edges are wider than this (default %(default)s px)")


def _board(args) -> Board:
    return Board(args.board, args.cols, args.rows, args.square, args.marker, args.dictionary)


def _print_rejected(rejected: dict[str, str]) -> None:
    for name, reason in sorted(rejected.items()):
        print(f"  skipped {name}: {reason}")


def _intrinsics(args) -> int:
    board = _board(args)
    out = Path(args.out)
    result = calibrate_intrinsics(args.images, board, min_images=args.min_images, k_coefficients=args.k_coefficients,
                                  camera_name=args.camera_name or out.stem, max_edge_width=args.max_blur)
    _print_rejected(result.rejected)
    for name, rms in result.per_image_rms.items():
        print(f"  used {name}: {rms:.3f} px")
    c = result.calibration
    print(f"{len(result.used)} images used, {len(result.rejected)} skipped")
    print(f"RMS reprojection error: {result.rms:.4f} px")
    print(f"fx {c.fx:.3f}  fy {c.fy:.3f}  cx {c.cx:.3f}  cy {c.cy:.3f}  ({c.width}x{c.height}, {c.distortion_model})")
    print("D " + " ".join(f"{v:.6g}" for v in c.D))
    write_calibration(c, out)
    print(f"wrote {out}")
    return 0


def _handeye(args) -> int:
    board = _board(args)
    calibration = read_calibration(args.camera_info)
    recording = load_recording(args.samples)
    setup = args.setup.replace("-", "_")
    result = calibrate_handeye(recording, board, calibration, setup, min_samples=args.min_samples,
                               max_edge_width=args.max_blur)
    _print_rejected(result.rejected)
    print(f"{len(result.used)} samples used, {len(result.rejected)} skipped")
    for name, method in result.methods.items():
        x, y, z = method.T[:3, 3]
        print(f"  {name:10s} camera at [{x:.4f}, {y:.4f}, {z:.4f}] m; board steadiness "
              f"{method.residual_m * 1000:.2f} mm, {math.degrees(method.residual_rad):.3f} deg")
    print(f"spread between methods: {result.spread_m * 1000:.2f} mm, {math.degrees(result.spread_rad):.3f} deg")
    pos, quat = result.mujoco_pose()
    print(f"refined from {result.method}: reprojection error {result.rms_px:.3f} px")
    print(f"camera optical frame in {result.parent}: position {np.round(result.T_parent_camera[:3, 3], 5).tolist()} m")
    print(f"as a MuJoCo camera: pos {np.round(pos, 5).tolist()}, quat [w, x, y, z] {np.round(quat, 6).tolist()}")
    out = write_extrinsics(args.out, args.camera, result)
    print(f"wrote {out} (camera {args.camera}); a scene reads it with `camera_extrinsics: {out}`")
    return 0


def add_calibrate_parser(subparsers) -> argparse.ArgumentParser:
    """Register `calibrate intrinsics` and `calibrate handeye` on an argparse subparsers object."""
    calibrate = subparsers.add_parser("calibrate", help="camera calibration: intrinsics and hand-eye")
    actions = calibrate.add_subparsers(dest="calibration", required=True)

    intrinsics = actions.add_parser("intrinsics", help="camera intrinsics from a folder of board images")
    intrinsics.add_argument("--images", required=True, metavar="DIR")
    _board_arguments(intrinsics)
    intrinsics.add_argument("--out", required=True, metavar="FILE.yaml", help="camera_info YAML to write")
    intrinsics.add_argument("--camera-name", help="camera_name in the YAML (default: the file's stem)")
    intrinsics.add_argument("--k-coefficients", type=int, choices=sorted(K_COEFFICIENTS), default=2,
                            help="radial distortion coefficients to fit (default %(default)s; 6: rational model)")
    intrinsics.add_argument("--min-images", type=int, default=MIN_IMAGES)
    intrinsics.set_defaults(func=_intrinsics)

    handeye = actions.add_parser("handeye", help="a camera's pose on or beside the robot from robot poses and "
                                                 "board images")
    handeye.add_argument("--samples", required=True, metavar="FILE.yaml",
                         help="recorded samples: base, link, and samples of {image, pos, quat}")
    handeye.add_argument("--setup", choices=("eye-in-hand", "eye-to-hand"), required=True)
    handeye.add_argument("--camera-info", required=True, metavar="FILE.yaml", help="the camera's intrinsics")
    _board_arguments(handeye)
    handeye.add_argument("--camera", required=True, help="the camera's name in the scene")
    handeye.add_argument("--out", required=True, metavar="EXTRINSICS.yaml",
                         help="camera-extrinsics YAML to write or update (a scene's camera_extrinsics)")
    handeye.add_argument("--min-samples", type=int, default=MIN_SAMPLES)
    handeye.set_defaults(func=_handeye)
    return calibrate


__all__ = ["add_calibrate_parser"]
