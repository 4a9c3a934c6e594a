"""A proxy-real cell as a driver backend (`backend: proxy`): a stand-in for a real cell that the
twin cannot match exactly.

A cell file (config/proxy_cells/*.yaml; docs/real2sim.md) names the cell's scene (a task's, or a
scene file), the hidden values of the twin's own parameters (`real2sim.params` names and the
latency), and effects outside the twin's model class:

- joint states measured with noise and quantised to an encoder's resolution;
- backlash: each arm joint's drive follows its command through a play of `backlash` radians;
- gripper compliance: the gripper's drive is `gripper_compliance` times as stiff;
- off-centre mass: an object's centre of mass moved within its body;
- cameras fixed in the cell: a pose a few millimetres and degrees from the calibration the
  cell publishes on /tf_static (offsets in the frame the camera is fixed to), and images with sensor noise, blur, an exposure gain and colour gains.

`ProxyHardware` runs the cell behind the driver core, so `r2s2r proxy up CELL.yaml` serves the
same topics and actions as a real arm's stack, and the pipeline sees it only through its bags
and its published calibration. Nothing of the truth is published.
"""

from __future__ import annotations

import copy
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import mujoco
import numpy as np

from r2s2r import paths
from r2s2r.camera.geometry import matrix_to_quat, quat_to_matrix
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware.base import HardwareError
from r2s2r.hardware.sim import SimHardware
from r2s2r.sim.scene import Scene, load_scene

CELLS_DIR = "config/proxy_cells"


@dataclass(frozen=True)
class CameraEffects:
    position_error: tuple[float, float, float] = (0.0, 0.0, 0.0)  # m, world frame
    rotation_error: tuple[float, float, float] = (0.0, 0.0, 0.0)  # rotation vector, rad
    noise: float = 0.0  # standard deviation, in 0-255 grey levels
    blur: float = 0.0  # Gaussian sigma, pixels
    exposure: float = 1.0  # gain on every channel
    colour: tuple[float, float, float] = (1.0, 1.0, 1.0)  # gains on R, G, B


@dataclass(frozen=True)
class CellEffects:
    position_noise: float = 0.0  # rad
    velocity_noise: float = 0.0  # rad/s
    effort_noise: float = 0.0  # N m
    encoder_resolution: float = 0.0  # rad; 0: not quantised
    backlash: float = 0.0  # rad of play in each arm joint's drive
    gripper_compliance: float = 1.0  # the gripper drive's stiffness, times the twin's
    off_centre_mass: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)  # object -> m
    cameras: Mapping[str, CameraEffects] = field(default_factory=dict)


@dataclass(frozen=True)
class ProxyCellConfig:
    name: str
    source: str
    scene: Scene
    hidden: Mapping[str, float]
    effects: CellEffects
    seed: int = 0
    task: str | None = None  # the task whose scene the cell is
    camera_rate_hz: float = 10.0


def _triple(sec: Section, name: str, default) -> tuple[float, float, float]:
    return tuple(float(v) for v in sec.vector(name, 3, default))


def load_cell(path: str | Path) -> ProxyCellConfig:
    """A proxy cell file, by path or by name (config/proxy_cells/<name>.yaml); every error names
    the file, the key and what was expected."""
    resolved = paths.resolve(path)
    if not resolved.is_file() and not str(path).endswith((".yaml", ".yml")):
        resolved = paths.resolve(f"{CELLS_DIR}/{path}.yaml")
    if not resolved.is_file():
        raise ConfigError(str(path), "", f"a proxy cell file, or the name of one in {CELLS_DIR}/")
    source = str(resolved)
    top = Section(load_yaml(resolved), source)
    top.reject_unknown({"name", "description", "task", "scene", "seed", "hidden", "effects", "camera_rate_hz"})
    task = top.string("task") if top.has("task") else None
    if (task is None) == (not top.has("scene")):
        raise top.error("task", "exactly one of 'task' (a task whose scene the cell is) and 'scene' (a scene file)")
    if task is not None:
        from r2s2r.eval.tasks import load_task, task_names
        if task not in task_names():
            raise top.error("task", "one of " + ", ".join(task_names()), task)
        scene = load_task(task).scene()
    else:
        scene = load_scene(paths.resolve(top.string("scene")))
    hidden_sec = top.section("hidden", {})
    hidden = {k: hidden_sec.number(k) for k in hidden_sec.data}
    from r2s2r.real2sim.params import TwinParameters
    from r2s2r.sim.twin import Twin
    twin = Twin(scene)
    known = TwinParameters(twin.model, twin.robot, scene.objects)
    for k in hidden:
        if k == "latency_s":
            if not 0 <= hidden[k] <= 0.2:
                raise hidden_sec.error(k, "a latency from 0 to 0.2 s", hidden[k])
            continue
        try:
            info = known.info(k)
        except (KeyError, ValueError, LookupError) as error:
            raise hidden_sec.error(k, f"a parameter of the twin ({error.args[0] if error.args else error})") from None
        if not info.lower <= hidden[k] <= info.upper:
            raise hidden_sec.error(k, f"a value within [{info.lower}, {info.upper}]", hidden[k])
    e = top.section("effects", {})
    e.reject_unknown({"joint_noise", "encoder_resolution", "backlash", "gripper_compliance", "off_centre_mass",
                      "cameras"})
    noise = e.section("joint_noise", {})
    noise.reject_unknown({"position", "velocity", "effort"})
    objects = {o.name for o in scene.objects}
    centre = e.section("off_centre_mass", {})
    for name in centre.data:
        if name not in objects:
            raise centre.error(name, "one of the scene's objects: " + ", ".join(sorted(objects)), name)
    cams = e.section("cameras", {})
    m = twin.model
    camera_names = {m.camera(i).name for i in range(m.ncam) if m.body_weldid[m.cam_bodyid[i]] == 0}
    cameras = {}
    for name in cams.data:
        if name not in camera_names:
            raise cams.error(name, "one of the cameras fixed in the cell: " + ", ".join(sorted(camera_names)), name)
        c = cams.section(name)
        c.reject_unknown({"position_error", "rotation_error", "noise", "blur", "exposure", "colour"})
        cameras[name] = CameraEffects(_triple(c, "position_error", (0, 0, 0)), _triple(c, "rotation_error", (0, 0, 0)),
                                      c.number("noise", 0.0, minimum=0.0), c.number("blur", 0.0, minimum=0.0),
                                      c.number("exposure", 1.0, minimum=0.0), _triple(c, "colour", (1, 1, 1)))
    effects = CellEffects(noise.number("position", 0.0, minimum=0.0), noise.number("velocity", 0.0, minimum=0.0),
                          noise.number("effort", 0.0, minimum=0.0), e.number("encoder_resolution", 0.0, minimum=0.0),
                          e.number("backlash", 0.0, minimum=0.0),
                          e.number("gripper_compliance", 1.0, minimum=0.05),
                          {k: _triple(centre, k, None) for k in centre.data}, cameras)
    return ProxyCellConfig(top.string("name", resolved.stem), source, scene, hidden, effects,
                           top.integer("seed", 0, minimum=0), task,
                           top.number("camera_rate_hz", 10.0, minimum=0.1))


def offset_camera(m: mujoco.MjModel, camera: str, dpos, drot) -> None:
    """Move a camera fixed in the cell by `dpos` (m) and turn it by the rotation vector `drot`
    (rad), both in the frame it is fixed to (the world, or a frame welded to it): a camera a
    little off its calibration."""
    i = m.camera(camera).id
    if m.body_weldid[m.cam_bodyid[i]] != 0:
        raise ValueError(f"proxy cell: camera {camera} rides on a link; only cameras fixed in the cell are offset")
    m.cam_pos[i] += np.asarray(dpos, float)
    angle = float(np.linalg.norm(drot))
    rot = np.eye(3)
    if angle > 0:
        quat = np.zeros(4)
        mujoco.mju_axisAngle2Quat(quat, np.asarray(drot, float) / angle, angle)
        rot = quat_to_matrix(quat)
    m.cam_quat[i] = matrix_to_quat(rot @ quat_to_matrix(m.cam_quat[i]))


def measured(sample: JointSample, rng, position_noise: float, velocity_noise: float, effort_noise: float,
             resolution: float = 0.0) -> JointSample:
    """A joint sample as the cell's sensors report it: Gaussian noise on each signal, positions
    quantised to the encoders' `resolution` (0: not quantised)."""
    n = len(sample.names)
    position = sample.position + rng.normal(0, position_noise, n)
    if resolution > 0:
        position = np.round(position / resolution) * resolution
    return JointSample(sample.stamp, sample.names, position, sample.velocity + rng.normal(0, velocity_noise, n),
                       sample.effort + rng.normal(0, effort_noise, n))


def build_twin(cell: ProxyCellConfig):
    """The cell's twin, truth applied, and a view of its cameras where the calibration says they
    are (what /tf_static publishes): (twin, view with .model and .data)."""
    from r2s2r.real2sim.params import TwinParameters
    from r2s2r.sim.twin import Twin
    twin = Twin(cell.scene, seed=cell.seed)
    m = twin.model
    calibrated = types.SimpleNamespace(model=copy.copy(m))  # before any edit: the cameras as calibrated
    calibrated.data = mujoco.MjData(calibrated.model)
    mujoco.mj_forward(calibrated.model, calibrated.data)
    params = TwinParameters(m, twin.robot, cell.scene.objects)
    params.prepare(m)
    params.apply(m, {k: v for k, v in cell.hidden.items() if k != "latency_s"})
    for name, cam in cell.effects.cameras.items():
        offset_camera(m, name, cam.position_error, cam.rotation_error)
    for name, shift in cell.effects.off_centre_mass.items():
        m.body_ipos[m.body(name).id] += np.asarray(shift, float)
    if cell.effects.gripper_compliance != 1.0:
        for act in twin._gripper_act:
            m.actuator_gainprm[act, 0] *= cell.effects.gripper_compliance
            m.actuator_biasprm[act, 1] *= cell.effects.gripper_compliance
    twin.reset()
    # The hidden gains and latency are the cell's own: a trial's runtime set-up (Task.start)
    # scales and adds to them as it does to a fitted twin's.
    twin.adopt_dynamics(float(cell.hidden.get("latency_s", 0.0)))
    return twin, calibrated


class ProxyHardware(SimHardware):
    """A proxy-real cell behind the Hardware interface (`backend: proxy`, setting `proxy.cell`)."""

    backend = "proxy"

    def __init__(self, robot, settings: Mapping | None = None):
        cell_path = (settings or {}).get("cell", "")
        if not cell_path:
            raise HardwareError("backend 'proxy' needs the setting proxy.cell: a proxy cell file "
                                f"({CELLS_DIR}/<name>.yaml, docs/real2sim.md)")
        try:  # a loaded cell too, for in-process recordings (real2sim.proxy.ProxyCell.from_config)
            self.cell = cell_path if isinstance(cell_path, ProxyCellConfig) else load_cell(cell_path)
        except ConfigError as error:
            raise HardwareError(f"proxy.cell: {error}") from None
        if self.cell.scene.robot != robot.name:
            raise HardwareError(f"proxy cell {self.cell.source} is a {self.cell.scene.robot} cell; this driver's "
                                f"robot is {robot.name}")
        super().__init__(self.cell.scene, seed=self.cell.seed)
        self._rng = np.random.default_rng(self.cell.seed)
        self._drive: np.ndarray | None = None  # each arm joint's drive position, behind the play
        self._calibrated = None

    def on_configure(self) -> None:
        self._compiled, self._calibrated = build_twin(self.cell)
        self._reset_on_configure = False
        super().on_configure()

    def read(self) -> JointSample:
        e = self.cell.effects
        return measured(self.twin.joint_sample(), self._rng, e.position_noise, e.velocity_noise, e.effort_noise,
                        e.encoder_resolution)

    def _through_play(self, target: np.ndarray) -> np.ndarray:
        """Where the drives go for `target`: each moves only once the command has taken up the play."""
        half = 0.5 * self.cell.effects.backlash
        target = np.asarray(target, float)
        if half <= 0:
            return target
        if self._drive is None:
            self._drive = target.copy()
        self._drive = np.clip(self._drive, target - half, target + half)
        return self._drive.copy()

    def write(self, command: JointCommand, gripper_openings, gripper_forces=None) -> None:
        self.twin.set_arm_targets(self._through_play(command.position))
        self._grippers(gripper_openings, gripper_forces)

    def advance_through(self, setpoints: np.ndarray, gripper_openings, steps_per_row: int,
                        gripper_forces=None) -> None:
        rows = np.array([self._through_play(row) for row in np.asarray(setpoints, float)])
        super().advance_through(rows, gripper_openings, steps_per_row, gripper_forces)

    def reset(self) -> None:
        super().reset()
        self._drive = None

    def camera_effects(self, camera: str, rgb: np.ndarray) -> np.ndarray:
        """The image as the cell's camera delivers it: blurred, exposed, tinted and noisy."""
        c = self.cell.effects.cameras.get(camera)
        if c is None:
            return rgb
        import cv2
        image = rgb.astype(np.float32)
        if c.blur > 0:
            image = cv2.GaussianBlur(image, (0, 0), c.blur)
        image *= c.exposure * np.asarray(c.colour, np.float32)
        if c.noise > 0:
            image += self._rng.normal(0, c.noise, image.shape).astype(np.float32)
        return np.clip(np.rint(image), 0, 255).astype(np.uint8)

    def calibrated_view(self):
        return self._calibrated


def cell_stack(cell: ProxyCellConfig, cameras: bool = True) -> dict:
    """The stack a proxy cell runs as: its driver node on `backend: proxy` (a stack YAML's mapping)."""
    robot_params = paths.resolve(f"config/robots/{cell.scene.robot}.yaml")
    parameters = [str(robot_params)] if robot_params.is_file() else []
    parameters.append({"robot": cell.scene.robot, "backend": "proxy", "proxy.cell": str(Path(cell.source)),
                       "camera_rate_hz": cell.camera_rate_hz if cameras else 0.0})
    return {"name": f"proxy_{cell.name}", "nodes": [{"name": "driver", "executable": "driver_node",
                                                      "parameters": parameters, "on_exit": "stop"}]}


__all__ = ["offset_camera", "measured", "CameraEffects", "CellEffects", "ProxyCellConfig", "ProxyHardware", "build_twin", "cell_stack", "load_cell"]
