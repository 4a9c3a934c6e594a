"""Camera calibrations and the camera_info YAML that camera_calibration_parsers reads and writes.

The file holds image_width, image_height, camera_name, camera_matrix (K, 3x3),
distortion_model, distortion_coefficients (D, 1xN), rectification_matrix (R, 3x3) and
projection_matrix (P, 3x4); each matrix is a mapping of rows, cols and a flat, row-major data
list. Numbers are written with the shortest text that reads back to the same double, so a file
written here reads back bit for bit and rewrites to the same text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from r2s2r.config import ConfigError, Section, load_yaml

# Distortion models of sensor_msgs/distortion_models.hpp and how many coefficients each takes.
DISTORTION_MODELS = {"plumb_bob": (5,), "rational_polynomial": (8,), "equidistant": (4,)}
INTRINSICS_EXPECTED = "K with focal lengths fx and fy greater than 0, and finite K and D"


@dataclass(frozen=True, eq=False)
class CameraCalibration:
    """What a sensor_msgs/CameraInfo says about a camera, independent of ROS."""

    width: int
    height: int
    K: np.ndarray  # 3x3 intrinsic matrix
    D: np.ndarray  # distortion coefficients, as many as the model takes
    R: np.ndarray  # 3x3 rectification (identity for a monocular camera)
    P: np.ndarray  # 3x4 projection of the rectified image
    distortion_model: str = "plumb_bob"
    camera_name: str = "camera"

    def __post_init__(self):
        for name, shape in (("K", (3, 3)), ("R", (3, 3)), ("P", (3, 4))):
            value = np.array(getattr(self, name), dtype=float)
            if value.shape != shape:
                raise ValueError(f"camera calibration: {name} has shape {value.shape}, expected {shape}")
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        d = np.array(self.D, dtype=float).reshape(-1)
        d.setflags(write=False)
        object.__setattr__(self, "D", d)
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"camera calibration: image size {self.width}x{self.height}, expected positive")

    @classmethod
    def pinhole(cls, width: int, height: int, fx: float, fy: float, cx: float, cy: float,
                distortion=(0.0, 0.0, 0.0, 0.0, 0.0), camera_name: str = "camera",
                distortion_model: str = "plumb_bob") -> "CameraCalibration":
        k = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
        return cls(int(width), int(height), k, distortion, np.eye(3), np.hstack([k, np.zeros((3, 1))]),
                   distortion_model, camera_name)

    @classmethod
    def uncalibrated(cls, width: int, height: int, camera_name: str = "camera") -> "CameraCalibration":
        """All zeros, as camera_info_manager publishes for a camera nobody has calibrated (K[0] == 0)."""
        return cls(int(width), int(height), np.zeros((3, 3)), (), np.zeros((3, 3)), np.zeros((3, 4)), "", camera_name)

    @property
    def calibrated(self) -> bool:
        return not self.intrinsics_problem()

    def intrinsics_problem(self) -> str:
        """'' where K and D are a usable calibration; else what is wrong with them, for a message
        that goes on "...; expected " + INTRINSICS_EXPECTED."""
        bad = [f"{name}[{i}] = {v}" for name in "KD" for i, v in enumerate(getattr(self, name).reshape(-1))
               if not math.isfinite(v)]
        if bad:
            return f"{', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}"
        if not self.K.any():
            return "K all zero (an uncalibrated camera, as camera_info_manager publishes one)"
        if not (self.fx > 0 and self.fy > 0):
            return f"K with fx {self.fx:g} and fy {self.fy:g}"
        return ""

    @property
    def fx(self) -> float:
        return float(self.K[0, 0])

    @property
    def fy(self) -> float:
        return float(self.K[1, 1])

    @property
    def cx(self) -> float:
        return float(self.K[0, 2])

    @property
    def cy(self) -> float:
        return float(self.K[1, 2])

    def scaled(self, width: int, height: int) -> "CameraCalibration":
        """The calibration of the same camera with its image resized to width x height.

        Pixel centres sit at integer coordinates, so a principal point scales about -0.5.
        """
        if (width, height) == (self.width, self.height) or not self.calibrated:
            return CameraCalibration(width, height, self.K, self.D, self.R, self.P, self.distortion_model,
                                     self.camera_name)
        sx, sy = width / self.width, height / self.height
        def rescale(m):
            m = m.copy()
            m[0, :] *= sx
            m[1, :] *= sy
            m[0, 2] += 0.5 * sx - 0.5
            m[1, 2] += 0.5 * sy - 0.5
            return m
        return CameraCalibration(width, height, rescale(self.K), self.D, self.R, rescale(self.P), self.distortion_model,
                                 self.camera_name)

    def __eq__(self, other) -> bool:
        if not isinstance(other, CameraCalibration):
            return NotImplemented
        return ((self.width, self.height, self.distortion_model, self.camera_name) ==
                (other.width, other.height, other.distortion_model, other.camera_name)
                and all(np.array_equal(getattr(self, m), getattr(other, m)) for m in "KDRP"))

    __hash__ = None


def _number(value: float) -> str:
    """The shortest decimal that reads back to the same double, always with a '.' (YAML 1.1 floats need one)."""
    if not math.isfinite(value):
        raise ValueError(f"camera calibration holds {value}; expected finite numbers")
    text = repr(float(value))
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + ("e" + exponent if exponent else "")


def _string(text: str) -> str:
    """A YAML scalar that reads back as exactly this string (quoted only where it must be)."""
    return yaml.safe_dump(text, default_flow_style=True, width=float("inf")).splitlines()[0]


def _matrix(name: str, values: np.ndarray, rows: int, cols: int) -> list[str]:
    data = ", ".join(_number(v) for v in np.asarray(values, float).reshape(-1))
    return [f"{name}:", f"  rows: {rows}", f"  cols: {cols}", f"  data: [{data}]"]


def calibration_yaml(calibration: CameraCalibration) -> str:
    """The camera_info YAML text, keys in camera_calibration_parsers' order."""
    c = calibration
    lines = [f"image_width: {c.width}", f"image_height: {c.height}", f"camera_name: {_string(c.camera_name)}"]
    lines += _matrix("camera_matrix", c.K, 3, 3)
    lines += [f"distortion_model: {_string(c.distortion_model)}"]
    lines += _matrix("distortion_coefficients", c.D, 1, len(c.D))
    lines += _matrix("rectification_matrix", c.R, 3, 3)
    lines += _matrix("projection_matrix", c.P, 3, 4)
    return "\n".join(lines) + "\n"


def write_calibration(calibration: CameraCalibration, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(calibration_yaml(calibration))
    return path


def _read_matrix(top: Section, name: str, rows: int | None, cols: int | None) -> np.ndarray:
    sec = top.section(name)
    r, c = sec.integer("rows", minimum=0), sec.integer("cols", minimum=0)
    if rows is not None and r != rows:
        raise sec.error("rows", f"{rows}", r)
    if cols is not None and c != cols:
        raise sec.error("cols", f"{cols}", c)
    data = sec.raw("data")
    if not isinstance(data, list) or len(data) != r * c:
        raise sec.error("data", f"a list of {r * c} numbers (rows x cols)", data)
    values = []
    for i, v in enumerate(data):
        try:  # other writers emit 1e-05, which YAML 1.1 reads as a string
            number = float(v) if not isinstance(v, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or not math.isfinite(number):
            raise sec.error(f"data[{i}]", "a finite number", v)
        values.append(number)
    return np.array(values, dtype=float).reshape(r, c)


def parse_calibration(data: dict, source: str = "<camera_info>") -> CameraCalibration:
    top = Section(data, source)
    width = top.integer("image_width", minimum=1)
    height = top.integer("image_height", minimum=1)
    name = top.raw("camera_name", "unknown")  # camera_calibration_parsers' default
    model = top.raw("distortion_model", "plumb_bob")  # the parsers assume plumb_bob when it is absent
    if not isinstance(model, str):
        raise top.error("distortion_model", "a string such as " + ", ".join(DISTORTION_MODELS), model)
    d = _read_matrix(top, "distortion_coefficients", None, None).reshape(-1)
    expected = DISTORTION_MODELS.get(model)
    if expected is not None and len(d) not in expected + (0,):
        raise top.error("distortion_coefficients", f"{' or '.join(map(str, expected))} coefficients for "
                        f"distortion_model {model}", len(d))
    return CameraCalibration(width=width, height=height, K=_read_matrix(top, "camera_matrix", 3, 3), D=d,
                             R=_read_matrix(top, "rectification_matrix", 3, 3),
                             P=_read_matrix(top, "projection_matrix", 3, 4), distortion_model=model,
                             camera_name=str(name))


def read_calibration(path: str | Path) -> CameraCalibration:
    """A camera_info YAML file; errors name the file, the key and what was expected."""
    return parse_calibration(load_yaml(path), str(path))


__all__ = ["CameraCalibration", "calibration_yaml", "write_calibration", "read_calibration",
           "parse_calibration", "ConfigError", "DISTORTION_MODELS", "INTRINSICS_EXPECTED"]
