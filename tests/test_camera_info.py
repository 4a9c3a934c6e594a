"""camera_info YAML: the format camera_calibration_parsers reads and writes, round-tripped exactly."""

import numpy as np
import pytest
import yaml

from r2s2r.camera.info import (CameraCalibration, calibration_yaml, parse_calibration, read_calibration,
                               write_calibration)
from r2s2r.config import ConfigError

# Laid out as camera_calibration_parsers (yaml-cpp) and ROS's cameracalibrator write it; numbers ours.
ROS_FILE = """\
image_width: 1280
image_height: 720
camera_name: narrow_stereo
camera_matrix:
  rows: 3
  cols: 3
  data: [912.4519, 0, 641.1183, 0, 911.8810, 362.5041, 0, 0, 1]
distortion_model: plumb_bob
distortion_coefficients:
  rows: 1
  cols: 5
  data: [0.1182, -0.2517, 1e-05, -0.000412, 0]
rectification_matrix:
  rows: 3
  cols: 3
  data: [1, 0, 0, 0, 1, 0, 0, 0, 1]
projection_matrix:
  rows: 3
  cols: 4
  data: [920.33, 0, 640.25, 0, 0, 919.8, 361.9, 0, 0, 0, 1, 0]
"""


def awkward_calibration() -> CameraCalibration:
    rng = np.random.default_rng(7)
    k = np.array([[612.3456789012345, 0.0013, 318.1234567], [0.0, 611.98765432, 241.000000001], [0.0, 0.0, 1.0]])
    r = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    p = np.hstack([k * 1.0000001, [[-37.12345678901], [1e-17], [0.0]]])
    return CameraCalibration(640, 480, k, rng.normal(size=8) * 10.0 ** rng.integers(-9, 2, 8), r, p,
                             "rational_polynomial", "cam: wrist #2")


def test_a_calibration_round_trips_exactly_through_the_yaml(tmp_path):
    original = awkward_calibration()
    path = write_calibration(original, tmp_path / "cam.yaml")
    text = path.read_text()
    back = read_calibration(path)
    assert back == original  # bit for bit: every K, D, R, P entry
    for name in "KDRP":
        assert getattr(back, name).tobytes() == getattr(original, name).tobytes()
    assert calibration_yaml(back) == text  # and it rewrites to the same text
    assert back.camera_name == "cam: wrist #2" and back.distortion_model == "rational_polynomial"


def test_the_yaml_has_camera_calibration_parsers_keys_and_layout():
    data = yaml.safe_load(calibration_yaml(CameraCalibration.pinhole(640, 480, 500.0, 501.0, 319.5, 239.5)))
    assert list(data) == ["image_width", "image_height", "camera_name", "camera_matrix", "distortion_model",
                          "distortion_coefficients", "rectification_matrix", "projection_matrix"]
    assert data["camera_matrix"] == {"rows": 3, "cols": 3, "data": [500.0, 0.0, 319.5, 0.0, 501.0, 239.5, 0.0, 0.0, 1.0]}
    assert data["projection_matrix"]["cols"] == 4 and data["distortion_coefficients"]["cols"] == 5


def test_a_file_written_by_ros_reads_with_its_values(tmp_path):
    path = tmp_path / "ost.yaml"
    path.write_text(ROS_FILE)
    cal = read_calibration(path)
    assert (cal.width, cal.height, cal.camera_name) == (1280, 720, "narrow_stereo")
    assert (cal.fx, cal.fy, cal.cx, cal.cy) == (912.4519, 911.8810, 641.1183, 362.5041)
    assert cal.D.tolist() == [0.1182, -0.2517, 1e-05, -0.000412, 0.0]  # 1e-05 is a string to YAML 1.1
    assert cal.P[0, 0] == 920.33 and cal.R.tolist() == np.eye(3).tolist()
    assert read_calibration(write_calibration(cal, tmp_path / "again.yaml")) == cal


def test_an_uncalibrated_camera_is_all_zeros_as_camera_info_manager_has_it():
    cal = CameraCalibration.uncalibrated(64, 48)
    assert not cal.calibrated and cal.K.sum() == 0 and cal.D.size == 0
    assert parse_calibration(yaml.safe_load(calibration_yaml(cal))) == cal


def test_scaling_keeps_pixel_centres_where_they_belong():
    cal = CameraCalibration.pinhole(640, 480, 500.0, 500.0, 319.5, 239.5)
    half = cal.scaled(320, 240)
    assert (half.fx, half.fy, half.cx, half.cy) == (250.0, 250.0, 159.5, 119.5)
    assert half.P[0, 2] == 159.5 and (half.width, half.height) == (320, 240)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.pop("image_width"), "image_width: expected a value"),
    (lambda d: d["camera_matrix"].update(rows=2), r"camera_matrix.rows: expected 3"),
    (lambda d: d["camera_matrix"]["data"].pop(), r"camera_matrix.data: expected a list of 9 numbers"),
    (lambda d: d["projection_matrix"]["data"].__setitem__(0, "abc"), r"projection_matrix.data\[0\]: expected a finite"),
    (lambda d: d["distortion_coefficients"].update(cols=4) or d["distortion_coefficients"]["data"].pop(),
     "5 coefficients for distortion_model plumb_bob"),
])
def test_bad_files_name_the_key_and_what_was_expected(tmp_path, edit, match):
    data = yaml.safe_load(ROS_FILE)
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=match):
        read_calibration(path)
    with pytest.raises(ConfigError, match="bad.yaml"):
        read_calibration(path)
