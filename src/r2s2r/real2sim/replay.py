"""Replay: the recorded command stream into the twin at its recorded times, on the episode's time base.

The commands go through the same path a driver runs them through (`JointController`,
`SafetyFilter`, `ControlLoop` at the robot's control rate), which turns them into one
setpoint per joint per physics step. That setpoint stream depends only on the commands and
their times, never on the measured state, so it is computed once per episode
(`setpoints`) and every rollout of a fit reuses it; a command latency is a shift of the
stream in time (`Setpoints.shifted`, linear between steps, so a fit sees latency as a smooth
parameter).

The twin starts where the robot was at the first joint state (arm and finger joints) with the
objects where the scene puts them, and is stepped with the stream; `Trace` keeps every
step's sensor values (joint positions, velocities, actuator efforts, object poses) and the
frames rendered at the recorded cameras' frame times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import mujoco
import numpy as np

from r2s2r.contract.types import CommandError, JointCommand, JointSample
from r2s2r.data.episode import Episode
from r2s2r.hardware.base import Hardware
from r2s2r.hardware.driver import Driver, send_script_command
from r2s2r.real2sim.params import TwinParameters
from r2s2r.sim.scene import Scene
from r2s2r.sim.servo import interpolated, twin_command_limits
from r2s2r.sim.twin import Twin


class _SetpointRecorder(Hardware):
    """A Hardware that only records what the control loop writes, one row per physics step, planned
    within the limits the twin's driver commands with."""

    backend = "replay"
    simulated = True

    def __init__(self, robot, sample: JointSample, timestep: float, model: mujoco.MjModel):
        super().__init__(robot)
        self._model = model
        self._sample = sample
        self._timestep = timestep
        self.time = 0.0
        self.arm: list[np.ndarray] = []
        self.grippers: list[np.ndarray] = []
        self._current = (sample.positions_of(robot.joint_names), np.zeros(len(robot.grippers)))

    def on_configure(self) -> None:
        pass

    def on_cleanup(self) -> None:
        pass

    def reset(self) -> None:
        pass

    def read(self) -> JointSample:
        return self._sample

    def command_limits(self, limits):
        return twin_command_limits(self.robot, self._model, limits)

    def write(self, command: JointCommand, gripper_openings, gripper_forces=None) -> None:
        self._current = (np.array(command.position), np.array(gripper_openings, float))

    def advance(self, steps: int = 1) -> None:
        for _ in range(steps):
            self.arm.append(self._current[0])
            self.grippers.append(self._current[1])
        self.time += steps * self._timestep

    @property
    def now(self) -> float:
        return self.time

    @property
    def timestep(self) -> float:
        return self._timestep


@dataclass(frozen=True, eq=False)
class Setpoints:
    """What the controller sent the joints at each physics step of the episode (latency 0)."""

    timestep: float
    arm: np.ndarray  # nsteps x arm joints, the robot's joint order
    grippers: np.ndarray  # nsteps x grippers, openings in metres
    rejected: dict = field(default_factory=dict)  # command kind -> how many the controller refused

    @property
    def nsteps(self) -> int:
        return len(self.arm)

    def shifted(self, latency_s: float) -> tuple[np.ndarray, np.ndarray]:
        """The stream as it reaches the joints `latency_s` later (negative: earlier), linear
        between steps; before its start it holds the first setpoint, after its end the last."""
        shift = latency_s / self.timestep
        index = np.arange(self.nsteps) - shift
        lo = np.clip(np.floor(index).astype(int), 0, self.nsteps - 1)
        hi = np.clip(lo + 1, 0, self.nsteps - 1)
        w = np.clip(index - np.floor(index), 0.0, 1.0)[:, None]
        w = np.where((index < 0)[:, None], 0.0, w)
        def mix(a):
            return a[lo] * (1 - w) + a[hi] * w
        return mix(self.arm), mix(self.grippers)


def initial_sample(episode: Episode) -> JointSample:
    j = episode.joints
    return JointSample(0.0, j.names, np.nan_to_num(j.position[0]), np.nan_to_num(j.velocity[0]),
                       np.nan_to_num(j.effort[0]))


def gripper_openings_at(episode: Episode, row: int = 0) -> np.ndarray:
    """Measured gripper openings (sum of the finger joints) in joint_states row `row`."""
    j = episode.joints
    out = []
    for g in episode.robot.grippers:
        cols = j.columns(g.joints)
        out.append(float(np.nansum(j.position[row, cols])))
    return np.array(out)


def setpoints(episode: Episode, twin: Twin, duration: float | None = None,
              control_rate_hz: float | None = None) -> Setpoints:
    """The setpoint stream of the episode's commands, run through the control path of `twin`'s
    driver (its limits, one row per physics step of its timestep)."""
    robot = episode.robot
    recorder = _SetpointRecorder(robot, initial_sample(episode), twin.timestep, twin.model)
    driver = Driver(recorder, control_rate_hz=control_rate_hz)  # the robot's driver, minus the robot
    driver.start()
    driver.loop.controller.hold_grippers(gripper_openings_at(episode))
    end = episode.duration if duration is None else duration
    commands = list(episode.commands)
    rejected: dict[str, int] = {}
    i = 0
    while recorder.now < end - 1e-9:
        now = recorder.now
        while i < len(commands) and commands[i].time <= now + 1e-9:
            c = commands[i]
            i += 1
            try:
                send_script_command(driver, c)
            except CommandError:  # the robot's driver refused it too; replay does what it did
                rejected[c.kind] = rejected.get(c.kind, 0) + 1
        driver.loop.cycle()
    arm = np.array(recorder.arm)
    grippers = np.array(recorder.grippers).reshape(len(arm), len(robot.grippers))
    return Setpoints(twin.timestep, arm, grippers, rejected)


@dataclass(frozen=True)
class SensorLayout:
    """Where a Twin's privileged sensors sit in sensordata (see sim.twin._add_privileged_sensors)."""

    joint_names: tuple[str, ...]  # arm joints, then finger joints
    narm: int
    objects: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.joint_names)

    def position(self, rows: np.ndarray) -> np.ndarray:
        return rows[..., : self.n]

    def velocity(self, rows: np.ndarray) -> np.ndarray:
        return rows[..., self.n: 2 * self.n]

    def effort(self, rows: np.ndarray) -> np.ndarray:
        return rows[..., 2 * self.n: 2 * self.n + self.narm]

    def object_pos(self, rows: np.ndarray) -> np.ndarray:
        start = 2 * self.n + self.narm
        k = len(self.objects)
        return rows[..., start: start + 3 * k].reshape(*rows.shape[:-1], k, 3)

    def object_quat(self, rows: np.ndarray) -> np.ndarray:
        start = 2 * self.n + self.narm + 3 * len(self.objects)
        k = len(self.objects)
        return rows[..., start: start + 4 * k].reshape(*rows.shape[:-1], k, 4)


class ReplayTwin:
    """A twin of `scene` with alignment's parameters, set up at an episode's initial state."""

    def __init__(self, scene: Scene, spec: mujoco.MjSpec | None = None):
        self.twin = Twin(scene, spec=spec)
        self.scene = scene
        self.robot = self.twin.robot
        self.parameters = TwinParameters(self.twin.model, self.robot, scene.objects)
        self.parameters.prepare(self.twin.model)
        self.layout = SensorLayout(self.twin.state_joint_names, len(self.twin.joint_names), self.twin.object_names)
        m = self.twin.model
        self.arm_act = np.array([m.actuator(n).id for n in self.twin.joint_names])
        self.gripper_act = np.array([m.actuator(g.name).id for g in self.robot.grippers], dtype=int)
        self.values: dict[str, float] = {}
        # A scene with fitted dynamics (sim.dynamics) brings its latency: values without one replay with it.
        self.latency_s = self.twin.command_latency_s

    @property
    def model(self) -> mujoco.MjModel:
        return self.twin.model

    def set_values(self, values: Mapping[str, float]) -> None:
        self.values = dict(values)
        self.parameters.apply(self.twin.model, self.values)

    def start(self, episode: Episode) -> np.ndarray:
        """Reset to the episode's first joint state; returns that initial state (mjSTATE_FULLPHYSICS)."""
        tw, m, d = self.twin, self.twin.model, self.twin.data
        tw.reset()
        sample = initial_sample(episode)
        for name in tw.state_joint_names:
            if name in sample.names:
                k = sample.names.index(name)
                d.qpos[m.joint(name).qposadr[0]] = sample.position[k]
                d.qvel[m.joint(name).dofadr[0]] = sample.velocity[k]
        d.ctrl[self.arm_act] = sample.positions_of(tw.joint_names)
        d.ctrl[self.gripper_act] = gripper_openings_at(episode)
        mujoco.mj_forward(m, d)
        return self.state()

    def state(self) -> np.ndarray:
        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        out = np.empty(mujoco.mj_stateSize(self.model, spec))
        mujoco.mj_getState(self.model, self.twin.data, out, spec)
        return out

    def controls(self, stream: Setpoints, latency_s: float) -> np.ndarray:
        """nsteps x nu controls: the shifted setpoints on the arm and gripper actuators, the arm's
        interpolated as the twin's drives do."""
        arm, grippers = stream.shifted(latency_s)
        ctrl = np.tile(self.twin.data.ctrl, (stream.nsteps, 1))
        ctrl[:, self.arm_act] = interpolated(arm, self.twin.hold_steps)
        if len(self.gripper_act):
            ctrl[:, self.gripper_act] = grippers
        return ctrl


@dataclass(frozen=True, eq=False)
class Trace:
    """A replay: sensor rows at t = i * timestep (i = 0 .. nsteps-1) and rendered frames."""

    timestep: float
    layout: SensorLayout
    sensordata: np.ndarray  # nsteps x nsensordata
    frames: dict[str, list[tuple[float, np.ndarray]]] = field(default_factory=dict)  # camera -> (t, rgb)
    masks: dict[str, list[tuple[float, np.ndarray]]] = field(default_factory=dict)  # camera -> (t, object mask)
    contacts: list[tuple[float, list]] = field(default_factory=list)  # (t, twin contacts) at sampled times
    unstable_at: float | None = None  # when MuJoCo found the state diverging (and reset it): the replay is void

    @property
    def times(self) -> np.ndarray:
        return np.arange(len(self.sensordata)) * self.timestep

    def sample(self, t: np.ndarray) -> np.ndarray:
        """Sensor rows at times `t` (linear between steps)."""
        index = np.clip(np.asarray(t, float) / self.timestep, 0, len(self.sensordata) - 1)
        lo = np.floor(index).astype(int)
        hi = np.minimum(lo + 1, len(self.sensordata) - 1)
        w = (index - lo)[..., None]
        return self.sensordata[lo] * (1 - w) + self.sensordata[hi] * w

    def object_pose(self, name: str, t: float) -> tuple[np.ndarray, np.ndarray]:
        k = self.layout.objects.index(name)
        i = int(np.clip(round(t / self.timestep), 0, len(self.sensordata) - 1))
        row = self.sensordata[i]
        return self.layout.object_pos(row)[k].copy(), self.layout.object_quat(row)[k].copy()


def replay(replay_twin: ReplayTwin, episode: Episode, stream: Setpoints, values: Mapping[str, float] | None = None,
           cameras: Sequence[str] = (), contact_times: Sequence[float] = ()) -> Trace:
    """Step the twin through the episode with parameters `values` (latency_s among them),
    rendering `cameras` (RGB and object masks) at their recorded frame times and keeping the
    twin's contacts at `contact_times`."""
    rt = replay_twin
    rt.set_values(values or {})
    rt.start(episode)
    ctrl = rt.controls(stream, float((values or {}).get("latency_s", rt.latency_s)))
    m, d = rt.model, rt.twin.data
    rows = np.empty((stream.nsteps, m.nsensordata))
    renderer = None
    schedule = []
    for cam in cameras:
        times = episode.camera(cam).rgb_times
        schedule += [(float(t), "frame", cam) for t in times if 0 <= t < stream.nsteps * stream.timestep]
    schedule += [(float(t), "contacts", None) for t in contact_times]
    schedule.sort(key=lambda e: e[0])
    frames: dict = {c: [] for c in cameras}
    masks: dict = {c: [] for c in cameras}
    contacts = []
    k = 0
    unstable_at = None
    bad = (int(mujoco.mjtWarning.mjWARN_BADQACC), int(mujoco.mjtWarning.mjWARN_BADQVEL),
           int(mujoco.mjtWarning.mjWARN_BADQPOS))
    if cameras:
        from r2s2r.sim.render import TwinRenderer
        renderer = TwinRenderer(rt.twin)
    try:
        for i in range(stream.nsteps):
            d.ctrl[:] = ctrl[i]
            mujoco.mj_step(m, d)
            rows[i] = d.sensordata
            if unstable_at is None and any(d.warning[w].number for w in bad):
                unstable_at = i * stream.timestep
            t_next = (i + 1) * stream.timestep
            while k < len(schedule) and schedule[k][0] <= t_next + 1e-9:
                t, what, cam = schedule[k]
                k += 1
                if what == "frame":
                    frames[cam].append((t, renderer.rgb(cam)))
                    masks[cam].append((t, object_mask(rt.twin, renderer, cam)))
                else:
                    contacts.append((t, rt.twin.contacts()))
    finally:
        if renderer is not None:
            renderer.close()
    return Trace(stream.timestep, rt.layout, rows, frames, masks, contacts, unstable_at)


def object_mask(twin: Twin, renderer, camera: str) -> np.ndarray:
    """H x W int: index + 1 of the scene object seen at each pixel, 0 elsewhere."""
    r = renderer._renderer(*twin.camera_resolution(camera))
    r.enable_segmentation_rendering()
    try:
        r.update_scene(twin.data, camera)
        seg = r.render()
    finally:
        r.disable_segmentation_rendering()
    ids, types = seg[:, :, 0], seg[:, :, 1]
    out = np.zeros(ids.shape, dtype=np.int32)
    m = twin.model
    for k, name in enumerate(twin.object_names):
        geom = m.geom(name).id
        out[(types == int(mujoco.mjtObj.mjOBJ_GEOM)) & (ids == geom)] = k + 1
    return out


__all__ = ["Setpoints", "setpoints", "ReplayTwin", "Trace", "replay", "SensorLayout", "object_mask",
           "initial_sample", "gripper_openings_at"]
