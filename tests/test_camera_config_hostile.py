"""camera_node subscribes to nothing: its hostile input is its parameters and its camera config.
Hypothesis writes camera config YAMLs with one thing wrong (rates and sizes of 0, negative, NaN
or huge, a camera_info whose K has fx = 0, unknown source kinds, missing keys, wrong types,
unknown keys): each is refused before the node starts, in one line that names the file, the
camera, the key, the value and what was expected, never a KeyError or TypeError; a config that
loads holds only values in range, and its source can be made."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rclpy.parameter import Parameter

from r2s2r.camera.config import (DEPTH_ENCODINGS, ENCODINGS, MAX_RATE, MAX_SIZE, MAX_WAIT_S, MIN_RATE,
                                 load_camera_config, make_source)
from r2s2r.camera.info import CameraCalibration, write_calibration
from r2s2r.config import ConfigError
from r2s2r.contract.names import CAMERA_NAME
from tests.ros_helpers import REPO

wrong_type = st.sampled_from([None, True, "30", [], {}, [1, 2]])
number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**12, 10**12),
                   st.sampled_from([0, -1, 0.0, 5e-324, 1e300, -1e-9, 2**70]), wrong_type)
size = st.one_of(st.integers(-5, 20000), st.sampled_from([0, -1, MAX_SIZE, MAX_SIZE + 1, 10**12, 640.0]), wrong_type)
text = st.one_of(st.text(max_size=8), wrong_type)
sources = st.one_of(st.sampled_from([
    "device:0", "device:²", "device:", "device:-1", "device:/dev/video0", "device:video0", "rtsp://cam/live",
    "http://cam/mjpg", "realsense:", "realsense:0123", "webcam0", "usb:0", "file:missing.mp4", "folder:missing",
    "twin:missing.yaml#scene", "twin:config/scenes/franka_table.yaml", "", "ftp://cam"]), text)
INFO_FILES = ["good.yaml", "fx_zero.yaml", "fy_negative.yaml", "all_zero.yaml", "nan_text.yaml", "not_utf8.yaml",
              "missing.yaml", "no_k.yaml"]
FIELDS = {  # what one camera's key may be set to
    "name": st.one_of(st.sampled_from(["", "cam/high", "1cam", "cam high", "cam\n", "cam_ü", "a" * 300]), text),
    "source": sources,
    "rate": number, "width": size, "height": size, "timeout": number, "wait_for_subscribers": number,
    "reconnect": st.one_of(st.fixed_dictionaries({}, optional={"initial": number, "max": number}), wrong_type,
                           st.just({"initial": 1.0, "jitter": 2})),
    "encoding": st.one_of(st.sampled_from(["rgb8", "yuv422", "RGB8", "mono8"]), text),
    "depth_encoding": st.one_of(st.sampled_from(["16UC1", "32FC1", "8UC1"]), text),
    "depth": st.one_of(st.booleans(), wrong_type), "at_end": st.one_of(st.sampled_from(["loop", "end", "stop"]), text),
    "frame_id": text, "fourcc": st.one_of(st.sampled_from(["MJPG", "MJP", "MJPGX", "ÄÄÄÄ"]), text),
    "camera_info": st.one_of(st.sampled_from(INFO_FILES), text),
    "exposure": number,  # not a key
}


def _write_info_files(folder) -> None:
    write_calibration(CameraCalibration.pinhole(640, 480, 500.0, 500.0, 319.5, 239.5), folder / "good.yaml")
    write_calibration(CameraCalibration.pinhole(640, 480, 0.0, 500.0, 319.5, 239.5), folder / "fx_zero.yaml")
    write_calibration(CameraCalibration.pinhole(640, 480, 500.0, -500.0, 319.5, 239.5), folder / "fy_negative.yaml")
    write_calibration(CameraCalibration.uncalibrated(640, 480), folder / "all_zero.yaml")
    good = yaml.safe_load((folder / "good.yaml").read_text())
    good["camera_matrix"]["data"][0] = "nan"
    (folder / "nan_text.yaml").write_text(yaml.safe_dump(good))
    (folder / "not_utf8.yaml").write_bytes(b"image_width: 640\n\xff\xfe\x00camera")
    del good["camera_matrix"]
    (folder / "no_k.yaml").write_text(yaml.safe_dump(good))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cameras")
    _write_info_files(folder)
    return folder


def _check_loaded(cameras) -> None:
    """Everything a config that loads holds is in range, and its source can be made."""
    for c in cameras:
        assert MIN_RATE <= c.rate <= MAX_RATE and math.isfinite(c.rate)
        assert c.width is None or (1 <= c.width <= MAX_SIZE and 1 <= c.height <= MAX_SIZE)
        assert 0 < c.timeout <= MAX_WAIT_S and 0 < c.reconnect_initial <= c.reconnect_max <= MAX_WAIT_S
        assert c.encoding in ENCODINGS and c.depth_encoding in DEPTH_ENCODINGS and c.wait_for_subscribers >= 0
        assert c.fourcc is None or (len(c.fourcc) == 4 and c.fourcc.isascii())
        assert c.calibration is None or (c.calibration.fx > 0 and c.calibration.fy > 0)
        make_source(c)  # not opened


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(sorted(FIELDS)), st.none(), min_size=1, max_size=2).flatmap(
    lambda keys: st.fixed_dictionaries({k: FIELDS[k] for k in keys})),
    drop=st.sets(st.sampled_from(["name", "source"]), max_size=1), twice=st.booleans())
def test_a_camera_config_loads_in_range_or_is_refused_in_one_line_naming_camera_key_value(folder, changes, drop,
                                                                                           twice):
    camera = {"name": "cam_a", "source": "device:0", **changes}
    for key in drop:
        camera.pop(key, None)
    path = folder / "cameras.yaml"
    path.write_text(yaml.safe_dump({"cameras": [camera, dict(camera, name="cam_b")] if twice else [camera]}))
    try:
        cameras = load_camera_config(path)
    except ConfigError as refused:  # nothing else: no KeyError, TypeError or ValueError from deeper down
        message = str(refused)
        assert "\n" not in message and message.startswith(f"{path}: ") and "expected" in message, message
        name = camera.get("name")
        if refused.key.startswith("cameras[0]") and refused.key != "cameras[0].name":
            assert isinstance(name, str) and CAMERA_NAME.fullmatch(name), message  # a bad name is refused first
            assert refused.key.startswith(f"cameras[0] ({name})."), message  # then every error names the camera
        assert refused.key.rsplit(".", 1)[-1] in {*FIELDS, "initial", "max", "jitter", "cameras"}, message  # the key
        if refused.got is not None:  # the value (what made it wrong)
            assert repr(refused.got) in message
        return
    _check_loaded(cameras)


@pytest.mark.parametrize("camera, key, expected", [
    ({"rate": float("nan")}, "rate", "expected a finite number, got nan"),
    ({"rate": 1e-9}, "rate", "expected a number >= 0.001, got 1e-09"),
    ({"rate": 5000}, "rate", "expected a number <= 1000.0, got 5000.0"),
    ({"width": 10**9, "height": 480}, "width", "expected an integer <= 16384, got 1000000000"),
    ({"timeout": 1e300}, "timeout", "expected a number <= 3600.0, got 1e+300"),
    ({"reconnect": {"initial": 0.5, "max": 1e12}}, "reconnect.max", "expected a number <= 3600.0, got 1000000000000.0"),
    ({"source": "device:²"}, "source", "expected device:INDEX (0, 1, ...) or device:/dev/videoN, got 'device:²'"),
    ({"source": "usb:0"}, "source", "expected device:INDEX|PATH, file:PATH"),
    ({"fourcc": "ÄÄÄÄ"}, "fourcc", "expected four ASCII characters, such as MJPG or YUYV, got 'ÄÄÄÄ'"),
    ({"camera_info": "fx_zero.yaml"}, "camera_info", "expected a calibration: K with focal lengths fx and fy "
                                                     "greater than 0, and finite K and D, got '{folder}/fx_zero.yaml "
                                                     "has K with fx 0 and fy 500'"),
    ({"camera_info": "all_zero.yaml"}, "camera_info", "has K all zero (an uncalibrated camera"),
    ({"camera_info": "nan_text.yaml"}, "camera_info", "expected a readable camera_info YAML ({folder}/nan_text.yaml: "
                                                      "camera_matrix.data[0]: expected a finite number, got 'nan')"),
    ({"camera_info": "not_utf8.yaml"}, "camera_info", "not_utf8.yaml: byte 17: expected a UTF-8 text file"),
    ({"camera_info": "missing.yaml"}, "camera_info", "missing.yaml: expected an existing YAML file, got 'file not "
                                                     "found')"),
])
def test_the_message_names_file_camera_key_value_and_what_was_expected(folder, camera, key, expected):
    path = folder / "named.yaml"
    path.write_text(yaml.safe_dump({"cameras": [{"name": "wrist", "source": "device:0", **camera}]}))
    with pytest.raises(ConfigError) as refused:
        load_camera_config(path)
    assert str(refused.value).startswith(f"{path}: cameras[0] (wrist).{key}: "), refused.value
    assert expected.format(folder=folder) in str(refused.value), refused.value


def test_a_camera_name_with_a_newline_is_not_a_topic_name(folder):
    path = folder / "newline.yaml"
    path.write_text(yaml.safe_dump({"cameras": [{"name": "cam\n", "source": "device:0"}]}))
    with pytest.raises(ConfigError, match=r"cameras\[0\].name: expected letters, digits and underscores"):
        load_camera_config(path)


# -- camera_node refuses them before it starts ---------------------------------------------------------------
@pytest.mark.parametrize("camera, wanted, expected", [
    ({"rate": -30.0}, None, "cameras[0] (cam_a).rate: expected a number greater than 0, got -30.0"),
    ({"camera_info": "fx_zero.yaml"}, None, "cameras[0] (cam_a).camera_info: expected a calibration: K with focal "
                                            "lengths fx and fy greater than 0"),
    ({"source": "webcam0"}, None, "cameras[0] (cam_a).source: expected device:INDEX|PATH"),
    ({"width": "640", "height": 480}, None, "cameras[0] (cam_a).width: expected an integer, got '640'"),
    ({}, ["cam_a", "cam_z"], "parameter 'cameras' names ['cam_z']; expected cameras of "),
])
def test_camera_node_is_refused_before_it_starts(folder, ros_context, camera, wanted, expected):
    from r2s2r.nodes.camera_node import CameraNode
    path = folder / "node.yaml"
    path.write_text(yaml.safe_dump({"cameras": [{"name": "cam_a", "source": "device:0", **camera}]}))
    overrides = [Parameter("config", value=str(path))] + ([Parameter("cameras", value=wanted)] if wanted else [])
    with pytest.raises(ValueError) as refused:
        CameraNode(context=ros_context, parameter_overrides=overrides)
    assert expected in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_a_camera_node_process_with_a_bad_config_exits_with_one_line(folder):
    path = folder / "process.yaml"
    path.write_text(yaml.safe_dump({"cameras": [{"name": "cam_a", "source": "device:0", "rate": float("nan")}]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "r2s2r.nodes.camera_node", "--ros-args", "-p", f"config:={path}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    assert done.stderr.strip().splitlines() == [
        f"[fatal] ConfigError: {path}: cameras[0] (cam_a).rate: expected a finite number, got nan"], done.stderr
