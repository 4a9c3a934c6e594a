"""Intrinsic calibration against the twin: board images rendered by a camera whose intrinsics
are known, at varied poses, must give those intrinsics and the board's pose back."""

import argparse
import math

import cv2
import numpy as np
import pytest

from tests.camera_helpers import BoardRig
from r2s2r.camera.board import Board
from r2s2r.camera.calibration import CalibrationError, board_pose, calibrate_intrinsics
from r2s2r.camera.cli import add_calibrate_parser
from r2s2r.camera.geometry import difference
from r2s2r.camera.info import CameraCalibration, read_calibration

CHESSBOARD = Board("chessboard", 9, 6, 0.025)  # 10 x 7 squares: one count odd, one even, so oriented
CHARUCO = Board("charuco", 11, 8, 0.025)
HELD_OUT = ([0.1, 1.05, 1.1], [-0.15, 1.1, 0.9], [0.0, 1.15, 1.0])  # camera positions not used to calibrate


@pytest.fixture(scope="module", params=[CHESSBOARD, CHARUCO], ids=lambda b: b.kind)
def rig(request):
    rig = BoardRig(request.param)
    rig.views = rig.random_views(16, seed=1)
    yield rig
    rig.close()


def named(views):
    return [(f"view_{i:02d}.png", image) for i, (image, _) in enumerate(views)]


def calibrate_cli(*args) -> int:
    parser = argparse.ArgumentParser(prog="r2s2r")
    add_calibrate_parser(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args(["calibrate", *args])
    return parsed.func(parsed)


def test_twin_intrinsics_project_points_where_the_renderer_draws_them():
    """The principal point convention: pixel centres at integers, so cx = (width - 1) / 2."""
    rig = BoardRig(CHESSBOARD, width=320, height=240, fovy=45.0)
    fx, fy, cx, cy = rig.intrinsics
    assert (cx, cy) == (159.5, 119.5) and fx == fy == pytest.approx(120 / math.tan(math.radians(22.5)))
    k = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
    errors = []
    for eye in ([0.0, 1.05, 1.0], [0.12, 1.1, 1.08], [-0.1, 1.08, 0.93]):
        image, truth = rig.view(np.array(eye))
        detection = CHESSBOARD.detect(image)
        points = (truth[:3, :3] @ detection.object_points.T.astype(float)).T + truth[:3, 3]
        projected = (k @ points.T).T
        errors.append(projected[:, :2] / projected[:, 2:] - detection.image_points)
    errors = np.concatenate(errors)
    rig.close()
    assert np.abs(errors.mean(axis=0)).max() < 0.05  # a half-pixel slip would show as 0.5
    assert np.sqrt(np.mean(np.sum(errors ** 2, axis=1))) < 0.25


def test_intrinsics_and_board_poses_are_recovered(rig):
    result = calibrate_intrinsics(named(rig.views), rig.board)
    assert not result.rejected and len(result.used) == 16
    assert result.rms < 0.5
    c = result.calibration
    for got, true in zip((c.fx, c.fy, c.cx, c.cy), rig.intrinsics):
        assert got == pytest.approx(true, rel=0.01)
    for (name, _), (_, truth) in zip(named(rig.views), rig.views):
        distance, angle = difference(result.board_poses[name], truth)
        assert distance < 0.002 and math.degrees(angle) < 0.2, name
    for eye in HELD_OUT:  # the board's pose from one new image (solvePnP) with the calibration
        image, truth = rig.view(np.array(eye))
        pose = board_pose(image, rig.board, c)
        distance, angle = difference(pose.T_camera_board, truth)
        assert distance < 0.002 and math.degrees(angle) < 0.2
        assert pose.rms < 0.5


def test_bad_images_are_reported_by_name_and_skipped(tmp_path, capsys):
    rig = BoardRig(CHESSBOARD)
    views = rig.random_views(7, seed=5)
    for i, (image, _) in enumerate(views[:6]):
        cv2.imwrite(str(tmp_path / f"good_{i}.png"), image)
    cv2.imwrite(str(tmp_path / "blurred.png"), cv2.GaussianBlur(views[6][0], (0, 0), 2.0))
    nothing, _ = rig.view(np.array([0.0, 1.0, 1.0]), target=np.array([0.0, 0.4, 1.0]))  # looking away
    cv2.imwrite(str(tmp_path / "no_board.png"), nothing)
    (tmp_path / "notes.txt").write_text("calibration session, board 9x6 inner corners")
    cv2.imwrite(str(tmp_path / "small.png"), cv2.resize(views[0][0], (320, 240)))
    fx = rig.intrinsics[0]
    rig.close()
    out = tmp_path / "out" / "cam.yaml"
    code = calibrate_cli("intrinsics", "--images", str(tmp_path), "--board", "chessboard", "--cols", "9",
                         "--rows", "6", "--square", "0.025", "--out", str(out))
    printed = capsys.readouterr().out
    assert code == 0
    assert "skipped blurred.png: blurred" in printed
    assert "skipped no_board.png: no 9 x 6 chessboard found" in printed
    assert "skipped notes.txt: not an image OpenCV can read" in printed
    assert "skipped small.png: image is 320x240, the others 640x480" in printed
    assert "6 images used, 4 skipped" in printed and "RMS reprojection error" in printed
    calibration = read_calibration(out)
    assert calibration.width == 640 and calibration.camera_name == "cam"
    assert calibration.fx == pytest.approx(fx, rel=0.02)  # six views: a looser check than the one above


def test_too_few_usable_images_is_a_clear_error(tmp_path):
    rig = BoardRig(CHESSBOARD)
    for i, (image, _) in enumerate(rig.random_views(2, seed=2)):
        cv2.imwrite(str(tmp_path / f"good_{i}.png"), image)
    rig.close()
    cv2.imwrite(str(tmp_path / "grey.png"), np.full((480, 640, 3), 128, np.uint8))
    with pytest.raises(CalibrationError, match=r"2 usable board views in .*, at least 5 needed .*\n"
                                               r"  grey.png: no 9 x 6 chessboard found"):
        calibrate_cli("intrinsics", "--images", str(tmp_path), "--board", "chessboard", "--cols", "9", "--rows", "6",
                      "--square", "0.025", "--out", str(tmp_path / "x.yaml"))
    assert not (tmp_path / "x.yaml").exists()


def test_a_folder_of_non_images_names_every_file(tmp_path):
    for name in ("a.txt", "b.csv", "c.png"):  # c.png is text with an image's name
        (tmp_path / name).write_text("1,2,3")
    with pytest.raises(CalibrationError) as error:
        calibrate_intrinsics(tmp_path, CHESSBOARD)
    message = str(error.value)
    assert message.startswith("0 usable board views")
    for name in ("a.txt", "b.csv", "c.png"):
        assert f"{name}: not an image OpenCV can read" in message
    with pytest.raises(CalibrationError, match="is not a folder of images"):
        calibrate_intrinsics(tmp_path / "missing", CHESSBOARD)


def test_a_symmetric_chessboard_has_no_unambiguous_pose():
    symmetric = Board("chessboard", 8, 6, 0.025)  # 9 x 7 squares: a half turn maps it onto itself
    assert not symmetric.oriented and CHESSBOARD.oriented and CHARUCO.oriented
    rig = BoardRig(symmetric)
    image, _ = rig.view(np.array([0.0, 1.1, 1.0]))
    camera = CameraCalibration.pinhole(640, 480, *rig.intrinsics)
    rig.close()
    assert len(symmetric.detect(image).image_points) == 48  # found, but which way round is unknowable
    with pytest.raises(CalibrationError, match="looks the same turned half a turn"):
        board_pose(image, symmetric, camera)


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="grid", cols=9, rows=6, square=0.02), "expected one of chessboard, charuco"),
    (dict(kind="chessboard", cols=1, rows=6, square=0.02), "at least 2 x 2"),
    (dict(kind="chessboard", cols=9, rows=6, square=0.0), "positive size in metres"),
    (dict(kind="charuco", cols=8, rows=6, square=0.02, marker=0.03), "between 0 and the square size"),
    (dict(kind="charuco", cols=8, rows=6, square=0.02, dictionary="DICT_9X9"), "ArUco dictionary"),
    (dict(kind="charuco", cols=20, rows=20, square=0.02, dictionary="DICT_4X4_50"), "has 50 markers"),
])
def test_bad_boards_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Board(**kwargs)
