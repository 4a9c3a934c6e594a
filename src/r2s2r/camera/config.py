"""Camera configuration YAML: the cameras one camera_node runs.

    cameras:
      - name: cam_high                 # topics cameras/<name>/...
        source: device:0               # see camera.sources for every URI form
        frame_id: cam_high_optical_frame   # default <name>_optical_frame
        rate: 30.0                     # frames per second published
        width: 640                     # output size; default camera_info's, else the source's
        height: 480
        encoding: rgb8                 # rgb8 | bgr8
        camera_info: cam_high.yaml     # ROS camera_info YAML (r2s2r calibrate intrinsics writes it)
        depth: false                   # realsense: and twin: sources: also publish depth/image_raw
        depth_encoding: 16UC1          # 16UC1 (millimetres) | 32FC1 (metres)
        at_end: loop                   # file: and folder: sources: loop | end (the node exits)
        reconnect: {initial: 0.5, max: 5.0}   # backoff between reconnection attempts, seconds
        timeout: 5.0                   # seconds a live source may go without a frame
        wait_for_subscribers: 0        # start reading once image_raw has had this many subscribers for 0.5 s
        fourcc: MJPG                   # device: sources: the pixel format to ask for

Relative paths are taken from the config file's folder first, then the package's share folder.
Every value is checked here, before a node starts: an error names the file, the camera, the key,
the value and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from r2s2r import paths
from r2s2r.camera.info import INTRINSICS_EXPECTED, CameraCalibration, read_calibration
from r2s2r.camera.sources import URI_FORMS, FolderSource, FrameSource, OpenCVSource, TwinSource, parse_uri
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.contract.frames import camera_optical_frame
from r2s2r.contract.names import CAMERA_NAME, CAMERA_NAME_EXPECTED

ENCODINGS = ("rgb8", "bgr8")
DEPTH_ENCODINGS = ("16UC1", "32FC1")
AT_END = ("loop", "end")
MAX_SIZE = 16384  # pixels a side
MIN_RATE, MAX_RATE = 0.001, 1000.0  # frames a second
MAX_WAIT_S = 3600.0  # the longest timeout and reconnection backoff


@dataclass(frozen=True)
class CameraConfig:
    name: str
    source: str  # the URI with its paths resolved
    frame_id: str
    rate: float = 30.0
    width: int | None = None
    height: int | None = None
    encoding: str = "rgb8"
    depth: bool = False
    depth_encoding: str = "16UC1"
    calibration: CameraCalibration | None = None  # from camera_info
    camera_info: str | None = None  # the file it came from
    at_end: str = "loop"
    reconnect_initial: float = 0.5
    reconnect_max: float = 5.0
    timeout: float = 5.0
    wait_for_subscribers: int = 0
    fourcc: str | None = None

    @property
    def scheme(self) -> str:
        return parse_uri(self.source)[0]


def _find(base: Path, path: str) -> Path:
    candidate = Path(path)
    if candidate.is_absolute():
        return candidate
    beside = base / candidate
    return beside if beside.exists() else paths.resolve(candidate)


def _resolve_source(sec: Section, base: Path) -> str:
    uri = sec.string("source")
    try:
        scheme, rest = parse_uri(uri)
    except ValueError:
        raise sec.error("source", URI_FORMS, uri) from None
    if scheme == "file":
        path = _find(base, rest)
        if not path.is_file():
            raise sec.error("source", "file:PATH naming an existing video file", uri)
        return f"file:{path}"
    if scheme == "folder":
        path = _find(base, rest)
        if not path.is_dir():
            raise sec.error("source", "folder:DIR naming an existing folder", uri)
        return f"folder:{path}"
    if scheme == "twin":
        scene_file, _, camera = rest.rpartition("#")
        if not scene_file or not camera:
            raise sec.error("source", "twin:SCENE.yaml#CAMERA", uri)
        path = _find(base, scene_file)
        from r2s2r.sim.scene import load_scene
        try:
            cameras = [c.name for c in load_scene(path).all_cameras()]
        except ConfigError as exc:  # it names the scene file and its key; this names the camera
            raise sec.error("source", f"twin:SCENE.yaml#CAMERA naming a scene that loads ({exc})", uri) from None
        if camera not in cameras:
            raise sec.error("source", f"a camera of {path}: " + ", ".join(cameras), camera)
        return f"twin:{path}#{camera}"
    if scheme == "device" and not _index(rest) and not Path(rest).is_absolute():
        raise sec.error("source", "device:INDEX (0, 1, ...) or device:/dev/videoN", uri)
    return uri


def _index(text: str) -> bool:
    """A device index: ASCII digits only (str.isdigit also takes '²', which int() refuses)."""
    return text.isascii() and text.isdigit()


def _camera(sec: Section, base: Path) -> CameraConfig:
    name = sec.string("name")
    if not CAMERA_NAME.fullmatch(name):
        raise sec.error("name", CAMERA_NAME_EXPECTED, name)
    sec = Section(sec.data, sec.source, f"{sec.path} ({name})")  # from here on errors name the camera too
    sec.reject_unknown({"name", "source", "frame_id", "rate", "width", "height", "encoding", "depth",
                        "depth_encoding", "camera_info", "at_end", "reconnect", "timeout", "wait_for_subscribers",
                        "fourcc"})
    source = _resolve_source(sec, base)
    scheme = parse_uri(source)[0]
    if sec.has("width") != sec.has("height"):
        raise sec.error("width" if sec.has("width") else "height", "width and height given together")
    width = sec.integer("width", None, minimum=1, maximum=MAX_SIZE) if sec.has("width") else None
    height = sec.integer("height", None, minimum=1, maximum=MAX_SIZE) if sec.has("height") else None
    calibration, info_path = None, None
    if sec.has("camera_info"):
        info_path = _find(base, sec.string("camera_info"))
        try:
            calibration = read_calibration(info_path)
        except ConfigError as exc:  # it names the camera_info file and its key; this names the camera
            raise sec.error("camera_info", f"a readable camera_info YAML ({exc})") from None
        problem = calibration.intrinsics_problem()
        if problem:
            raise sec.error("camera_info", f"a calibration: {INTRINSICS_EXPECTED}", f"{info_path} has {problem}")
        if width is None:
            width, height = calibration.width, calibration.height
        elif (width, height) != (calibration.width, calibration.height):
            raise sec.error("camera_info", f"a calibration for the configured {width}x{height} image",
                            f"{info_path} is for {calibration.width}x{calibration.height}")
    depth = sec.boolean("depth", False)
    if depth and scheme not in ("realsense", "twin"):
        raise sec.error("depth", "false: only realsense: and twin: sources measure depth", depth)
    at_end = sec.string("at_end", "loop", choices=AT_END)
    if sec.has("at_end") and scheme not in ("file", "folder"):
        raise sec.error("at_end", "no at_end: only file: and folder: sources end", at_end)
    reconnect = sec.section("reconnect", {})
    reconnect.reject_unknown({"initial", "max"})
    initial = reconnect.number("initial", 0.5, positive=True, maximum=MAX_WAIT_S)
    fourcc = sec.string("fourcc", None) if sec.has("fourcc") else None
    if fourcc is not None and (len(fourcc) != 4 or not fourcc.isascii()):
        raise sec.error("fourcc", "four ASCII characters, such as MJPG or YUYV", fourcc)
    return CameraConfig(
        name=name, source=source, frame_id=sec.string("frame_id", camera_optical_frame(name)),
        rate=sec.number("rate", 30.0, positive=True, minimum=MIN_RATE, maximum=MAX_RATE), width=width, height=height,
        encoding=sec.string("encoding", "rgb8", choices=ENCODINGS), depth=depth,
        depth_encoding=sec.string("depth_encoding", "16UC1", choices=DEPTH_ENCODINGS), calibration=calibration,
        camera_info=str(info_path) if info_path else None, at_end=at_end, reconnect_initial=initial,
        reconnect_max=reconnect.number("max", max(5.0, initial), minimum=initial, maximum=MAX_WAIT_S),
        timeout=sec.number("timeout", 5.0, positive=True, maximum=MAX_WAIT_S),
        wait_for_subscribers=sec.integer("wait_for_subscribers", 0, minimum=0), fourcc=fourcc)


def parse_camera_config(data: dict, source: str = "<cameras>", base: Path | None = None) -> tuple[CameraConfig, ...]:
    top = Section(data, source)
    top.reject_unknown({"cameras"})
    base = base if base is not None else Path(source).parent
    cameras = tuple(_camera(sec, base) for sec in top.sections("cameras"))
    if not cameras:
        raise top.error("cameras", "a list of at least one camera")
    names = [c.name for c in cameras]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise top.error("cameras", "unique camera names", duplicates)
    return cameras


def load_camera_config(path: str | Path) -> tuple[CameraConfig, ...]:
    """The cameras of a camera config YAML; errors name the file, the key and what was expected."""
    resolved = paths.resolve(path)
    return parse_camera_config(load_yaml(resolved), str(resolved), resolved.parent)


def make_source(config: CameraConfig) -> FrameSource:
    """The FrameSource a camera's URI names (not yet opened)."""
    scheme, rest = parse_uri(config.source)
    if scheme == "device":
        return OpenCVSource(config.source, "device", int(rest) if _index(rest) else rest, config.width,
                            config.height, config.rate, config.fourcc, config.timeout)
    if scheme == "file":
        return OpenCVSource(config.source, "file", rest)
    if scheme == "network":
        return OpenCVSource(config.source, "network", rest, timeout_s=config.timeout)
    if scheme == "folder":
        return FolderSource(config.source, Path(rest))
    if scheme == "twin":
        scene_file, _, camera = rest.rpartition("#")
        return TwinSource(config.source, Path(scene_file), camera, config.depth)
    from r2s2r.camera.realsense import RealSenseSource
    return RealSenseSource(config.source, rest, config.width or 640, config.height or 480, config.rate,
                           config.depth, config.timeout)


__all__ = ["CameraConfig", "load_camera_config", "parse_camera_config", "make_source", "ConfigError",
           "ENCODINGS", "DEPTH_ENCODINGS", "AT_END"]
