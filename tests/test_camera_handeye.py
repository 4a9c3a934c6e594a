"""Hand-eye calibration against the twin: the FR3 with its wrist camera over a board on the table
(eye-in-hand), and a fixed camera watching a board on the hand (eye-to-hand)."""

import argparse
import math

import cv2
import numpy as np
import pytest
import yaml

from tests.camera_helpers import ArmRig, camera_pose, body_pose
from r2s2r.camera.board import Board
from r2s2r.camera.calibration import CalibrationError
from r2s2r.camera.cli import add_calibrate_parser
from r2s2r.camera.geometry import difference, invert, matrix_to_quat
from r2s2r.camera.handeye import calibrate_handeye, load_recording
from r2s2r.camera.info import CameraCalibration, read_calibration, write_calibration
from r2s2r.config import ConfigError
from r2s2r.sim.scene import load_scene
from r2s2r.sim.twin import Twin

POSES = 20
BOARDS = {"eye_in_hand": Board("chessboard", 9, 6, 0.03), "eye_to_hand": Board("charuco", 6, 5, 0.025)}
BOARD_ARGS = {"eye_in_hand": ["--board", "chessboard", "--cols", "9", "--rows", "6", "--square", "0.03"],
              "eye_to_hand": ["--board", "charuco", "--cols", "6", "--rows", "5", "--square", "0.025"]}


def record(rig: ArmRig, folder, seed: int = 0):
    """Move the twin arm through random poses near home; save each image and the flange pose."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(POSES):
        rig.set_arm(rig.home + rng.uniform(-0.3, 0.3, 7))
        name = f"pose_{i:02d}.png"
        cv2.imwrite(str(folder / name), rig.image())
        t = rig.link_in_base()
        samples.append({"image": name, "pos": t[:3, 3].tolist(), "quat": matrix_to_quat(t[:3, :3]).tolist()})
    path = folder / "samples.yaml"
    path.write_text(yaml.safe_dump({"base": rig.BASE, "link": rig.LINK, "samples": samples}))
    return path, rig.truth()


def handeye_cli(*args) -> int:
    parser = argparse.ArgumentParser(prog="r2s2r")
    add_calibrate_parser(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args(["calibrate", "handeye", *args])
    return parsed.func(parsed)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """Both setups recorded once and calibrated through the CLI into one extrinsics file."""
    root = tmp_path_factory.mktemp("handeye")
    extrinsics = root / "extrinsics.yaml"
    out = {}
    for setup, camera in (("eye_in_hand", "wrist"), ("eye_to_hand", "fixed")):
        folder = root / setup
        folder.mkdir()
        rig = ArmRig(BOARDS[setup], setup)
        samples, truth = record(rig, folder)
        info = write_calibration(CameraCalibration.pinhole(640, 480, *rig.twin.camera_intrinsics(rig.camera)),
                                 folder / "camera_info.yaml")
        rig.close()
        code = handeye_cli("--samples", str(samples), "--setup", setup.replace("_", "-"), "--camera-info", str(info),
                           *BOARD_ARGS[setup], "--camera", camera, "--out", str(extrinsics))
        assert code == 0
        out[setup] = dict(samples=samples, info=info, truth=truth, camera=camera)
    return root, extrinsics, out


@pytest.mark.parametrize("setup", ["eye_in_hand", "eye_to_hand"])
def test_the_camera_pose_is_recovered_within_3_mm_and_a_third_of_a_degree(sessions, setup):
    root, _, out = sessions
    session = out[setup]
    result = calibrate_handeye(load_recording(session["samples"]), BOARDS[setup], read_calibration(session["info"]),
                               setup)
    assert len(result.used) >= 15
    distance, angle = difference(result.T_parent_camera, session["truth"])
    assert distance < 0.003 and math.degrees(angle) < 0.3
    assert set(result.methods) == {"tsai", "park", "horaud", "andreff", "daniilidis"}
    assert result.spread_m < 0.05 and result.rms_px < 0.5
    assert result.parent == ("fr3_link8" if setup == "eye_in_hand" else "fr3_link0")


def test_the_cli_reports_every_method_and_the_spread(sessions, capsys, tmp_path):
    _, _, out = sessions
    session = out["eye_to_hand"]
    handeye_cli("--samples", str(session["samples"]), "--setup", "eye-to-hand", "--camera-info", str(session["info"]),
                *BOARD_ARGS["eye_to_hand"], "--camera", "fixed", "--out", str(tmp_path / "e.yaml"))
    printed = capsys.readouterr().out
    for method in ("tsai", "park", "horaud", "andreff", "daniilidis"):
        assert method in printed
    assert "spread between methods:" in printed and "reprojection error" in printed


def test_the_twin_reads_the_calibrated_poses_from_the_scene(sessions):
    """The extrinsics file, named by a scene, places both cameras where the calibration found them."""
    root, extrinsics, out = sessions
    written = yaml.safe_load(extrinsics.read_text())
    assert [c["name"] for c in written["cameras"]] == ["wrist", "fixed"]  # the second run kept the first camera
    scene_file = root / "scene.yaml"
    scene_file.write_text(yaml.safe_dump({
        "robot": "franka_fr3",
        # The fixed camera as first set up by eye, about right; the calibration corrects it.
        "cameras": [{"name": "fixed", "width": 640, "height": 480, "fovy": 50.0, "pos": [1.0, 0.2, 0.6],
                     "lookat": [0.45, 0.0, 0.45]}],
        "camera_extrinsics": "extrinsics.yaml"}))
    twin = Twin(load_scene(scene_file))
    wrist = invert(body_pose(twin, "fr3_link8")) @ camera_pose(twin, "wrist")
    fixed = invert(body_pose(twin, "fr3_link0")) @ camera_pose(twin, "fixed")
    for got, setup in ((wrist, "eye_in_hand"), (fixed, "eye_to_hand")):
        distance, angle = difference(got, out[setup]["truth"])
        assert distance < 0.003 and math.degrees(angle) < 0.3, setup
    assert twin.camera_resolution("wrist") == (320, 240)  # the robot's own wrist camera, moved, not resized
    assert twin.camera_names.count("wrist") == 1


def test_too_few_samples_with_a_board_is_a_clear_error(sessions, tmp_path):
    _, _, out = sessions
    session = out["eye_in_hand"]
    data = yaml.safe_load(session["samples"].read_text())
    data["samples"] = data["samples"][:3]
    for sample in data["samples"]:
        sample["image"] = str(session["samples"].parent / sample["image"])
    data["samples"].append({"image": "missing.png", "pos": [0, 0, 0], "quat": [1, 0, 0, 0]})
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError, match=r"3 usable hand-eye samples, at least 5 needed.*\n  missing.png: "
                                               r"not an image OpenCV can read"):
        handeye_cli("--samples", str(short), "--setup", "eye-in-hand", "--camera-info", str(session["info"]),
                    *BOARD_ARGS["eye_in_hand"], "--camera", "wrist", "--out", str(tmp_path / "e.yaml"))


def test_bad_samples_and_extrinsics_files_name_the_key(tmp_path):
    bad = tmp_path / "samples.yaml"
    bad.write_text(yaml.safe_dump({"base": "fr3_link0", "link": "fr3_link8",
                                   "samples": [{"image": "a.png", "pos": [0, 0, 0], "quat": [1, 1, 0, 0]}]}))
    with pytest.raises(ConfigError, match=r"samples\[0\].quat: expected a unit quaternion"):
        load_recording(bad)
    (tmp_path / "extrinsics.yaml").write_text(yaml.safe_dump({"cameras": [{"name": "ceiling", "pos": [0, 0, 2],
                                                                           "quat": [1, 0, 0, 0]}]}))
    scene = tmp_path / "scene.yaml"
    scene.write_text(yaml.safe_dump({"robot": "franka_fr3", "camera_extrinsics": "extrinsics.yaml"}))
    with pytest.raises(ConfigError, match=r"cameras\[0\].name: expected a camera of the scene or the robot: "
                                          r"scene, wrist"):
        load_scene(scene)


def test_a_scene_camera_named_like_the_robots_overrides_it_and_keeps_what_it_does_not_set():
    from r2s2r.sim.scene import parse_scene
    scene = parse_scene({"robot": "franka_fr3", "cameras": [{"name": "wrist", "width": 640, "height": 480}]})
    wrist = next(c for c in scene.all_cameras() if c.name == "wrist")
    assert (wrist.width, wrist.height, wrist.fovy, wrist.parent) == (640, 480, 70.0, "fr3_hand")
    assert [c.name for c in scene.all_cameras()].count("wrist") == 1
    twin = Twin(scene)
    assert twin.camera_resolution("wrist") == (640, 480) and twin.camera_names.count("wrist") == 1
