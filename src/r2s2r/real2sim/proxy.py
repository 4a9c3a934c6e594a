"""A proxy-real cell: a twin whose parameters are hidden from the pipeline, recorded as a real cell is.

The pipeline is meant to see a real robot only through its bags and its camera calibration.
This cell is built from r2s2r's own pieces (SimHardware, the driver core) with everything a real
cell would differ in changed after compile: joint damping, armature, friction loss, actuator
gains, object masses and friction (`hidden`, in `real2sim.params` names), a command latency
(a delay buffer between a command's issue and the controller), joint sensor noise, depth noise,
and camera poses a few millimetres and degrees off their calibration. It records through
`EpisodeWriter`, the writer the recorder node uses, with the recorder's clock apart from the
robot's.

A proxy cell file's cell (`ProxyCell.from_config`, real2sim.proxy_cell) is recorded the same
way, through ProxyHardware, with the effects outside the twin's model class that the file adds.

`truth` of a recording keeps what a test compares against and the pipeline never reads: the
objects' poses at every camera frame, the true camera poses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import mujoco
import numpy as np

from r2s2r.camera.geometry import MUJOCO_TO_OPTICAL
from r2s2r.camera.info import CameraCalibration
from r2s2r.data.episode import EpisodeWriter
from r2s2r.hardware.driver import Driver, send_script_command
from r2s2r.hardware.sim import SimHardware
from r2s2r.real2sim.markers import Marker, add_markers
from r2s2r.real2sim.params import TwinParameters
from r2s2r.real2sim.proxy_cell import ProxyCellConfig, ProxyHardware, measured, offset_camera
from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin, build_scene_spec
from r2s2r.skills.ik import ArmIK
from r2s2r.skills.stages import min_jerk, top_down

_DIVERGED = (int(mujoco.mjtWarning.mjWARN_BADQACC), int(mujoco.mjtWarning.mjWARN_BADQVEL),
             int(mujoco.mjtWarning.mjWARN_BADQPOS))
ROBOT_CLOCK_S = 1000.0  # the robot stamps its states with its own clock, this far from sim time
RECORDER_CLOCK_S = 1.7e9  # the recorder logs on the wall clock
STATE_TRANSPORT_S = 0.0004  # joint_states reach the recorder this long after their stamp
IMAGE_TRANSPORT_S = 0.006


@dataclass(frozen=True)
class ScriptCommand:
    time: float  # seconds from the episode's start, when the command is issued (and logged)
    kind: str  # positions | gripper
    target: str  # group or gripper
    values: tuple[float, ...]


@dataclass(frozen=True)
class Hidden:
    """What the proxy cell hides from the pipeline."""

    values: Mapping[str, float] = field(default_factory=dict)  # real2sim.params names, latency_s among them
    camera_offsets: Mapping[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = \
        field(default_factory=dict)  # camera -> (position offset m, rotation vector rad), world frame
    position_noise: float = 2e-5  # rad (encoders)
    velocity_noise: float = 2e-3  # rad/s
    effort_noise: float = 0.05  # N m
    depth_noise: float = 0.0008  # m


@dataclass
class Truth:
    frame_times: np.ndarray
    object_poses: dict[str, list[tuple[np.ndarray, np.ndarray]]]  # per frame
    final_object_poses: dict[str, tuple[np.ndarray, np.ndarray]]
    camera_poses: dict[str, np.ndarray]  # camera -> 4x4 optical frame in the world, as rendered
    outcome: dict = field(default_factory=dict)


def camera_calibration(twin: Twin, camera: str) -> CameraCalibration:
    width, height = twin.camera_resolution(camera)
    fx, fy, cx, cy = twin.camera_intrinsics(camera)
    return CameraCalibration.pinhole(width, height, fx, fy, cx, cy, camera_name=camera)


def camera_pose(model: mujoco.MjModel, data: mujoco.MjData, camera: str) -> np.ndarray:
    """The camera's optical frame in the world (4 x 4) as the model renders it."""
    cam = model.camera(camera).id
    T = np.eye(4)
    T[:3, :3] = data.cam_xmat[cam].reshape(3, 3) @ MUJOCO_TO_OPTICAL
    T[:3, 3] = data.cam_xpos[cam]
    return T


class ProxyCell:
    def __init__(self, scene: Scene, hidden: Hidden, markers: Mapping[str, Marker] | None = None, seed: int = 0,
                 config: ProxyCellConfig | None = None):
        """`config`: record a proxy cell file's cell (real2sim.proxy_cell: its hidden values and its
        effects, through ProxyHardware) instead of `hidden` (markers are not added to it)."""
        self.scene = scene
        self.hidden = hidden
        self.markers = dict(markers or {})
        self.seed = seed
        self.config = config

    @classmethod
    def from_config(cls, config: ProxyCellConfig, seed: int | None = None) -> "ProxyCell":
        """A cell file's cell, recorded in-process; `seed` replaces its noise's seed."""
        config = config if seed is None else replace(config, seed=seed)
        return cls(config.scene, Hidden(values=dict(config.hidden)), seed=config.seed, config=config)

    def _spec(self) -> mujoco.MjSpec:
        spec = build_scene_spec(self.scene)
        if self.markers:
            add_markers(spec, self.markers)
        return spec

    def record(self, script: Sequence[ScriptCommand], path: str | Path, duration: float,
               cameras: Sequence[str] = (), frame_rate_hz: float = 10.0, depth: bool = True,
               seed: int | None = None, calibration_frames: int = 2) -> Truth:
        """Run `script` on the cell for `duration` seconds and write the episode bag to `path`.

        Cameras record RGB (and depth) at `frame_rate_hz` from the start; `calibration_frames`
        frames are taken before the first command, while the scene is at rest."""
        rng = np.random.default_rng(self.seed if seed is None else seed)
        if self.config is not None:  # the cell file's truth and effects, as the proxy backend serves them
            hardware = ProxyHardware(get_robot(self.scene.robot), {"cell": self.config})
            driver = Driver(hardware)
            driver.start()
            twin = hardware.twin
            measure, look = hardware.read, hardware.camera_effects
        else:
            twin = Twin(self.scene, seed=self.seed, spec=self._spec())
            params = TwinParameters(twin.model, twin.robot, self.scene.objects)
            params.prepare(twin.model)
            params.apply(twin.model, self.hidden.values)
            self._offset_cameras(twin)
            twin.reset()
            twin.set_command_latency(float(self.hidden.values.get("latency_s", 0.0)))  # hidden, like the rest
            driver = Driver(SimHardware.from_twin(twin, reset=False))  # the cell as set up above
            driver.start()
            h = self.hidden

            def measure():
                return measured(twin.joint_sample(), rng, h.position_noise, h.velocity_noise, h.effort_noise)

            def look(camera, rgb):
                return rgb
        loop = driver.loop
        robot = twin.robot
        state_every = max(1, int(round(loop.rate_hz / robot.state_rate_hz)))
        frame_every = max(1, int(round(loop.rate_hz / frame_rate_hz))) if cameras else 0
        renderer = None
        truth = Truth(np.zeros(0), {n: [] for n in twin.object_names}, {}, {})
        frame_times = []
        commands = sorted(script, key=lambda c: c.time)
        with EpisodeWriter(path, robot.name, meta={"source": "proxy-real cell", "stack": "proxy"}) as bag:
            if cameras:
                from r2s2r.sim.render import TwinRenderer
                renderer = TwinRenderer(twin)
                for cam in cameras:
                    truth.camera_poses[cam] = camera_pose(twin.model, twin.data, cam)
                    bag.camera_info(cam, camera_calibration(twin, cam), ROBOT_CLOCK_S, RECORDER_CLOCK_S)
            k = 0
            try:
                cycle = 0
                while twin.time < duration - 1e-9:
                    now = twin.time
                    while k < len(commands) and commands[k].time <= now + 1e-9:
                        c = commands[k]
                        k += 1
                        stamp = RECORDER_CLOCK_S + now
                        if c.kind == "positions":
                            bag.positions(c.target, c.values, stamp)
                        else:
                            bag.gripper(c.target, c.values[0], stamp)
                        send_script_command(driver, c)
                    if cycle % state_every == 0:
                        sample = measure()  # the robot stamps its states on its own clock
                        bag.joint_sample(replace(sample, stamp=ROBOT_CLOCK_S + sample.stamp),
                                         RECORDER_CLOCK_S + now + STATE_TRANSPORT_S)
                    if frame_every and cycle % frame_every == 0:
                        self._frames(bag, twin, renderer, cameras, depth, rng, truth, look)
                        frame_times.append(now)
                    if cycle % 500 == 0:
                        bag.diagnostics("driver", 0, "ok", {"backend": "proxy", "cycle": cycle}, ROBOT_CLOCK_S + now,
                                        RECORDER_CLOCK_S + now + STATE_TRANSPORT_S)
                    loop.cycle()
                    cycle += 1
                    if cycle % 50 == 0 and any(twin.data.warning[w].number for w in _DIVERGED):
                        # MuJoCo has reset the state: what follows would be recorded from the start.
                        raise RuntimeError(f"proxy cell: the physics diverged near t = {now:.3f} s; {path} is void")
            finally:
                if renderer is not None:
                    renderer.close()
        truth.frame_times = np.array(frame_times)
        truth.final_object_poses = twin.object_poses()
        self.twin = twin
        return truth

    # -- what makes it "real" ---------------------------------------------------------------------------
    def _offset_cameras(self, twin: Twin) -> None:
        for cam, (dpos, drot) in self.hidden.camera_offsets.items():
            offset_camera(twin.model, cam, dpos, drot)

    def _frames(self, bag, twin, renderer, cameras, depth, rng, truth, look) -> None:
        stamp = ROBOT_CLOCK_S + twin.time
        for cam in cameras:
            w, h = twin.camera_resolution(cam)
            bag.image(cam, look(cam, renderer.rgb(cam)), stamp, RECORDER_CLOCK_S + twin.time + IMAGE_TRANSPORT_S)
            if depth:
                d = renderer.depth(cam) + rng.normal(0, self.hidden.depth_noise, (h, w))
                bag.depth(cam, d, stamp, RECORDER_CLOCK_S + twin.time + IMAGE_TRANSPORT_S)
        for name, pose in twin.object_poses().items():
            truth.object_poses[name].append(pose)


# -- scripted episodes ---------------------------------------------------------------------------------------
def _segments(ik: ArmIK, q0: np.ndarray, waypoints, rate_hz: float, t0: float) -> tuple[list, np.ndarray, float]:
    """Min-jerk straight lines between TCP waypoints [(pos, rot, duration)], as joint targets at rate_hz."""
    out = []
    q = q0.copy()
    pos, _ = ik.fk(q)
    t = t0
    for goal_pos, goal_rot, duration in waypoints:
        goal_pos = np.asarray(goal_pos, float)
        steps = max(1, int(round(duration * rate_hz)))
        start = pos.copy()
        for i in range(1, steps + 1):
            s = min_jerk(i / steps)
            result = ik.solve(start + s * (goal_pos - start), goal_rot, q, iterations=8)
            q = result.q
            out.append(ScriptCommand(t + i / rate_hz, "positions", ik.group.name, tuple(float(v) for v in q)))
        t += steps / rate_hz
        pos = goal_pos
    return out, q, t


def grasp_lift_script(robot, start_q: np.ndarray, object_pos, object_yaw: float, width: float, squeeze: float,
                      lift: float = 0.06, hover: float = 0.1, grasp_height: float | None = None,
                      rate_hz: float = 100.0, settle_s: float = 0.3, speed_s: float = 0.7, dwell_s: float = 0.0,
                      place=None, hold_s: float = 0.4, release_dwell_s: float = 0.0) -> tuple[list, float]:
    """Reach over an object, descend, close the gripper to `width - squeeze`, lift by `lift`,
    hold, lower it back (or, with `place` (x, y), carry it there and put it down), open and
    withdraw. Returns the commands and the episode's length.

    `grasp_height`: the TCP's height at the grasp (default the object's centre height).
    `dwell_s`: hold still at the grasp pose before closing. An arm that lags its setpoints (soft
    gains, latency) is still above the grasp when the stream reaches it; closing then pinches the
    object's top edge, a contact no two twins resolve alike. `release_dwell_s`: the same before
    opening, so that a lagging arm has put the object down (a ball let go in motion rolls on)."""
    group = robot.groups[0].name
    gripper = robot.grippers[0]
    ik = ArmIK(robot, group)
    # Fingers close along the TCP's y axis: across the object's y (its narrower side by convention).
    rot = top_down(object_yaw)
    p = np.asarray(object_pos, float)
    z = p[2] if grasp_height is None else grasp_height
    above = p.copy()
    above[2] = z + hover
    at = above.copy()
    at[2] = z
    up = at.copy()
    up[2] = z + lift
    open_width = gripper.opening_range[1]
    closed = max(gripper.opening_range[0], width - squeeze)
    cmds = [ScriptCommand(0.05, "gripper", gripper.name, (open_width,))]
    t = settle_s
    part, q, t = _segments(ik, start_q, [(above, rot, speed_s * 1.6), (at, rot, speed_s)], rate_hz, t)
    cmds += part
    if dwell_s > 0:
        cmds += _hold(group, q, t, dwell_s, rate_hz)
        t += dwell_s
    cmds.append(ScriptCommand(t + 0.01, "gripper", gripper.name, (closed,)))
    t += 0.6  # the fingers close
    hold = [ScriptCommand(t - 0.6 + (i + 1) / rate_hz, "positions", group, tuple(float(v) for v in q))
            for i in range(int(0.6 * rate_hz))]
    cmds += hold
    down = at + [0, 0, 0.004]
    path = [(up, rot, speed_s), (up, rot, hold_s)]
    if place is not None:
        # Carry it to `place`, the same height above the support, and put it down there.
        down = np.array([place[0], place[1], down[2]])
        path.append((np.array([place[0], place[1], up[2]]), rot, 2 * speed_s))
    path.append((down, rot, speed_s))
    part, q, t = _segments(ik, q, path, rate_hz, t)
    cmds += part
    if release_dwell_s > 0:
        cmds += _hold(group, q, t, release_dwell_s, rate_hz)
        t += release_dwell_s
    above = down + [0, 0, hover - 0.004]
    cmds.append(ScriptCommand(t + 0.01, "gripper", gripper.name, (open_width,)))
    t += 0.5
    cmds += [ScriptCommand(t - 0.5 + (i + 1) / rate_hz, "positions", group, tuple(float(v) for v in q))
             for i in range(int(0.5 * rate_hz))]
    part, q, t = _segments(ik, q, [(above, rot, speed_s)], rate_hz, t)
    cmds += part
    return cmds, t + 0.2


def _hold(group: str, q: np.ndarray, t: float, seconds: float, rate_hz: float) -> list[ScriptCommand]:
    return [ScriptCommand(t + (i + 1) / rate_hz, "positions", group, tuple(float(v) for v in q))
            for i in range(int(round(seconds * rate_hz)))]


def push_script(robot, start_q: np.ndarray, object_pos, object_yaw: float, half_length: float, distance: float,
                height: float = 0.015, direction: float = 0.0, speed_s: float = 0.6, gap: float = 0.02,
                rate_hz: float = 100.0, settle_s: float = 0.3, hover: float = 0.08) -> tuple[list, float]:
    """Close the gripper, come down behind an object and push it `distance` along its own x axis
    turned by `direction` (rad), the closed fingers' side against its face, then back off and rise.
    `half_length`: the object's half extent along the push; `height`: the TCP's height in the push.
    The object slides on its support all along: the force the arm needs is its friction times
    its weight, which is what makes friction identifiable from the arm's efforts."""
    group = robot.groups[0].name
    gripper = robot.grippers[0]
    ik = ArmIK(robot, group)
    heading = object_yaw + direction
    u = np.array([math.cos(heading), math.sin(heading), 0.0])
    # The fingers close along the TCP's y: turned along the push, the closed pair is a paddle.
    rot = top_down(heading + math.pi / 2)
    p = np.asarray(object_pos, float)
    finger = 0.012  # half the closed fingers' thickness along the push
    start = p - u * (half_length + gap + finger)
    start[2] = height
    above = start + [0, 0, hover]
    end = start + u * distance
    back = end - u * 0.03
    cmds = [ScriptCommand(0.05, "gripper", gripper.name, (gripper.opening_range[0],))]
    part, q, t = _segments(ik, start_q, [(above, rot, 1.6 * speed_s), (start, rot, speed_s)], rate_hz, settle_s)
    cmds += part
    cmds += _hold(group, q, t, 0.2, rate_hz)
    t += 0.2
    part, q, t = _segments(ik, q, [(end, rot, max(speed_s, distance / 0.08)), (end, rot, 0.3), (back, rot, 0.4),
                                   (back + [0, 0, hover], rot, speed_s)], rate_hz, t)
    cmds += part
    return cmds, t + 0.2


def excitation_script(robot, duration: float = 3.0, amplitude: float = 0.25, rate_hz: float = 100.0,
                      seed: int = 0, start_q: np.ndarray | None = None) -> list[ScriptCommand]:
    """Joint-space excitation for identification: every joint of every group swings about its
    start (default home) as a sum of two sines of its own frequencies (0.4 to 1.6 Hz), faded in
    and out so the arm starts and ends at rest, streamed at `rate_hz`."""
    rng = np.random.default_rng(seed)
    q0 = robot.home_positions if start_q is None else np.asarray(start_q, float)
    n = len(q0)
    freqs = rng.uniform(0.4, 1.6, (2, n))
    phases = rng.uniform(0, 2 * math.pi, (2, n))
    lower, upper = robot.limits.lower + 0.05, robot.limits.upper - 0.05
    cmds = []
    for i in range(1, int(duration * rate_hz) + 1):
        t = i / rate_hz
        fade = math.sin(math.pi * min(t / duration, 1.0)) ** 2
        q = q0 + fade * amplitude * 0.5 * np.sum(np.sin(2 * math.pi * freqs * t + phases) - np.sin(phases), axis=0)
        q = np.clip(q, lower, upper)
        k = 0
        for g in robot.groups:
            cmds.append(ScriptCommand(t, "positions", g.name, tuple(float(v) for v in q[k:k + len(g.joints)])))
            k += len(g.joints)
    return cmds


__all__ = ["ProxyCell", "excitation_script", "push_script", "Hidden", "Truth", "ScriptCommand", "grasp_lift_script", "camera_calibration", "camera_pose"]
