"""The MuJoCo twin: one compiled scene, stepped deterministically, rendered offscreen.

A Twin owns its MjModel / MjData. It knows nothing of ROS: the driver node and the
evaluation engine both use it through `hardware.SimHardware`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import mujoco
import numpy as np

from r2s2r.contract.types import JointSample
from r2s2r.robots import get_robot
from r2s2r.robots.model import add_camera, build_robot_spec, home_ctrl, home_qpos, with_openings
from r2s2r.sim.dynamics import apply_dynamics, write_joint_dynamics
from r2s2r.sim.fixtures import add_fixture
from r2s2r.sim.scene import ObjectSpec, Scene
from r2s2r.sim.servo import hold_steps

_GEOM = {"box": mujoco.mjtGeom.mjGEOM_BOX, "cylinder": mujoco.mjtGeom.mjGEOM_CYLINDER,
         "sphere": mujoco.mjtGeom.mjGEOM_SPHERE, "capsule": mujoco.mjtGeom.mjGEOM_CAPSULE}
_STATE = mujoco.mjtState.mjSTATE_INTEGRATION  # everything mj_step reads: restore is exact
# A target may lead its joint by this many times the drive's lag at full speed (Twin.following_bound).
FOLLOWING_MARGIN = 2.0


def _geom_size(obj: ObjectSpec) -> list[float]:
    if obj.shape == "box":
        return [s / 2 for s in obj.size]
    if obj.shape == "sphere":
        return [obj.size[0], 0, 0]
    return [obj.size[0], obj.size[1] / 2, 0]  # cylinder / capsule: radius, half-height


@dataclass(frozen=True)
class Contact:
    body1: str
    body2: str
    geom1: str
    geom2: str
    pos: np.ndarray
    normal: np.ndarray  # from body1 to body2
    normal_force: float  # N
    distance: float  # negative: penetration


def _add_privileged_sensors(spec: mujoco.MjSpec, robot, objects) -> None:
    """Joint state, actuator effort and object poses as MuJoCo sensors: mj_step extracts them in C
    every step, in this order, into contiguous blocks of sensordata."""
    state_joints = robot.joint_names + robot.gripper_joint_names
    for kind in (mujoco.mjtSensor.mjSENS_JOINTPOS, mujoco.mjtSensor.mjSENS_JOINTVEL):
        for joint in state_joints:
            spec.add_sensor(type=kind, objtype=mujoco.mjtObj.mjOBJ_JOINT, objname=joint)
    for joint in robot.joint_names:
        spec.add_sensor(type=mujoco.mjtSensor.mjSENS_ACTUATORFRC, objtype=mujoco.mjtObj.mjOBJ_ACTUATOR, objname=joint)
    for kind in (mujoco.mjtSensor.mjSENS_FRAMEPOS, mujoco.mjtSensor.mjSENS_FRAMEQUAT):
        for obj in objects:
            spec.add_sensor(type=kind, objtype=mujoco.mjtObj.mjOBJ_BODY, objname=obj.name)


def build_scene_spec(scene: Scene, privileged_sensors: bool = True) -> mujoco.MjSpec:
    robot = get_robot(scene.robot)
    spec = build_robot_spec(robot)
    spec.option.timestep = scene.timestep
    world = spec.worldbody
    spec.visual.headlight.ambient = [0.25, 0.25, 0.25]
    spec.add_texture(name="floor_tex", type=mujoco.mjtTexture.mjTEXTURE_2D,
                     builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, rgb1=[0.3, 0.32, 0.35],
                     rgb2=[0.25, 0.27, 0.3], width=256, height=256)
    floor_mat = spec.add_material(name="floor_mat", texrepeat=[4, 4])
    floor_mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "floor_tex"
    floor_z = (scene.table.height - scene.table.size[2]) - 0.7 if scene.table else 0.0
    floor_z = min(floor_z, 0.0) if scene.table else 0.0
    world.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.05], pos=[0, 0, floor_z],
                   material="floor_mat")
    if scene.table is not None:
        t = scene.table
        table = world.add_body(name="table", pos=[t.center[0], t.center[1], t.height - t.size[2] / 2])
        table.add_geom(name="table_top", type=mujoco.mjtGeom.mjGEOM_BOX, size=[s / 2 for s in t.size],
                       rgba=list(t.rgba), friction=[t.friction, 0.005, 0.0001])
    for obj in scene.objects:
        body = world.add_body(name=obj.name, pos=list(obj.pos), quat=list(obj.quat))
        if not obj.fixed:
            body.add_freejoint(name=f"{obj.name}_free")
        body.add_geom(name=obj.name, type=_GEOM[obj.shape], size=_geom_size(obj), mass=obj.mass,
                      rgba=list(obj.rgba), friction=[obj.friction, 0.005, 0.0001], condim=4)
    for fixture in scene.fixtures:
        add_fixture(world, fixture)
    for cam in scene.cameras:
        parent = world if cam.parent is None else spec.body(cam.parent)
        if parent is None:
            raise ValueError(f"{scene.source}: camera {cam.name}: parent body {cam.parent!r} is not in the scene")
        robot_camera = spec.camera(cam.name)
        if robot_camera is not None:  # the scene overrides the robot's camera of this name
            spec.delete(robot_camera)
        add_camera(parent, cam)
    for light in scene.lights:
        world.add_light(name=light.name, pos=list(light.pos), dir=list(light.dir), diffuse=list(light.diffuse),
                        castshadow=light.castshadow)
    cameras = scene.all_cameras()
    width = max([640] + [c.width for c in cameras])
    height = max([480] + [c.height for c in cameras])
    spec.visual.global_.offwidth = width  # the offscreen buffer must hold the largest camera
    spec.visual.global_.offheight = height
    if not scene.robot_cameras:
        overridden = {c.name for c in scene.cameras}
        for cam in robot.cameras:
            existing = spec.camera(cam.name) if cam.name not in overridden else None
            if existing is not None:
                spec.delete(existing)
    if privileged_sensors:
        _add_privileged_sensors(spec, robot, scene.objects)
    return spec


class Twin:
    """A compiled scene with the robot's arm joints, grippers and objects indexed by name."""

    def __init__(self, scene: Scene, seed: int | None = None, spec: mujoco.MjSpec | None = None):
        """`spec`: build_scene_spec(scene) with the caller's additions (a calibration board, a
        fixture) made before compiling; by default the scene's spec as it is."""
        self.scene = scene
        self.robot = get_robot(scene.robot)
        self.spec = build_scene_spec(scene) if spec is None else spec
        self.model = self.spec.compile()
        # Fitted dynamics (the scene's `dynamics` file) replace the RobotSpec's values after compiling.
        self.fitted_latency_s = 0.0  # the cell's own command latency, as system identification found it
        if scene.dynamics is not None:
            apply_dynamics(self.model, scene.dynamics, [o.name for o in scene.objects])
            self.fitted_latency_s = float(scene.dynamics.command_latency_s)
        self.command_latency_s = self.fitted_latency_s
        self._delayed: deque = deque()  # (due time, actuator ids, values) while commands are delayed
        self.data = mujoco.MjData(self.model)
        self.seed = scene.seed if seed is None else seed
        m = self.model
        self.joint_names = self.robot.joint_names
        self.gripper_names = tuple(g.name for g in self.robot.grippers)
        self.state_joint_names = self.joint_names + self.robot.gripper_joint_names
        self._arm_act = np.array([m.actuator(n).id for n in self.joint_names])
        # A slice when the arm's actuators are consecutive (they are, as robots.model adds them):
        # writing a slice of ctrl costs a fraction of a fancy-indexed write, 1000 times a second.
        first = int(self._arm_act[0]) if self._arm_act.size else 0
        consecutive = np.array_equal(self._arm_act, np.arange(first, first + self._arm_act.size))
        self._arm_ctrl = slice(first, first + self._arm_act.size) if consecutive else self._arm_act
        self._arm_qpos = np.array([m.joint(n).qposadr[0] for n in self.joint_names], dtype=int)
        self._arm_dof = np.array([m.joint(n).dofadr[0] for n in self.joint_names], dtype=int)
        self._gripper_act = np.array([m.actuator(n).id for n in self.gripper_names], dtype=int)
        # Each gripper's grip force bound as the scene builds it (N on the opening tendon): a
        # commanded limit narrows it until the next command or reset.
        self._gripper_max_force = m.actuator_forcerange[self._gripper_act, 1].copy()
        self._gripper_forces_set: bytes | None = None
        # The arm servos' own gains (kp, kv): the fitted ones where the scene names a dynamics file.
        self._servo_gains = (m.actuator_gainprm[self._arm_act, 0].copy(), -m.actuator_biasprm[self._arm_act, 2].copy())
        self._gripper_tendon = np.array([m.tendon(f"{n}_opening").id for n in self.gripper_names], dtype=int)
        self.object_names = tuple(o.name for o in scene.objects)
        self.camera_names = tuple(m.camera(i).name for i in range(m.ncam))
        self._initial_qpos = home_qpos(self.robot, m)
        self._initial_ctrl = home_ctrl(self.robot, m)
        # The drives interpolate: each physics step applies the mean of the arm targets of the last
        # `hold_steps` steps (sim.servo.hold_steps), so a setpoint written once per control period
        # is reached along a line over the next period instead of as a step.
        self.hold_steps = hold_steps(self.robot, self.timestep)
        self._arm_goal = self._initial_ctrl[self._arm_act].copy()  # the latest target, as it came due
        self._arm_window = np.tile(self._arm_goal, (self.hold_steps, 1))
        self._window_at = 0
        # Views into sensordata, filled by mj_step itself (see _add_privileged_sensors).
        n, k, a = len(self.state_joint_names), len(self.object_names), len(self.joint_names)
        blocks = np.cumsum([0, n, n, a, 3 * k, 4 * k])
        sd = self.data.sensordata
        self.position = sd[blocks[0]:blocks[1]]
        self.velocity = sd[blocks[1]:blocks[2]]
        self._arm_effort = sd[blocks[2]:blocks[3]]
        self.object_pos = sd[blocks[3]:blocks[4]].reshape(k, 3)
        self.object_quat = sd[blocks[4]:blocks[5]].reshape(k, 4)
        self._fingers = np.array([len(g.joints) for g in self.robot.grippers], dtype=int)
        # Sensors are evaluated before mj_step integrates: after a step they describe the state
        # one timestep earlier. This is that state's time.
        self._sensor_time = 0.0
        self.reset()

    # -- lifecycle -------------------------------------------------------------------------
    def reset(self, seed: int | None = None, time: float = 0.0) -> None:
        """Back to the scene's initial state: robot at home, objects where the scene puts them;
        the clock at `time` (a soak's next episode goes on from the last one's clock, so that
        nodes on use_sim_time never see time run backwards)."""
        if seed is not None:
            self.seed = seed
        self.rng = np.random.default_rng(self.seed)
        mujoco.mj_resetData(self.model, self.data)
        self.data.time = float(time)
        self._delayed.clear()
        self.set_gripper_forces(None)
        self.data.qpos[:] = self._initial_qpos
        self.data.ctrl[:] = self._initial_ctrl
        self._hold_arm(self._initial_ctrl[self._arm_act])
        mujoco.mj_forward(self.model, self.data)
        self._sensor_time = self.data.time

    def pose(self, arm_positions: np.ndarray, gripper_openings: np.ndarray) -> None:
        """The robot placed at rest at these arm positions (`joint_names` order) and gripper
        openings, its drives holding there, the objects left where they are: a still frame to
        render, not a motion (nothing is stepped)."""
        arm = np.asarray(arm_positions, float)
        openings = np.asarray(gripper_openings, float)
        if arm.shape != (len(self.joint_names),) or openings.shape != (len(self.gripper_names),):
            raise ValueError(f"a pose of {arm.shape} arm positions and {openings.shape} openings; expected "
                             f"({len(self.joint_names)},) and ({len(self.gripper_names)},)")
        self.data.qpos[self._arm_qpos] = arm
        self.data.qvel[:] = 0.0
        with_openings(self.robot, self.model, self.data.qpos, openings)
        self.data.ctrl[self._arm_act] = arm
        self.data.ctrl[self._gripper_act] = openings
        self._hold_arm(arm)
        mujoco.mj_forward(self.model, self.data)
        self._sensor_time = self.data.time

    def snapshot(self) -> np.ndarray:
        """The full integration state (time, qpos, qvel, act, ctrl, warm start, ...)."""
        size = mujoco.mj_stateSize(self.model, _STATE)
        state = np.empty(size)
        mujoco.mj_getState(self.model, self.data, state, _STATE)
        return state

    def restore(self, state: np.ndarray) -> None:
        self._delayed.clear()  # commands in flight are not part of the state
        mujoco.mj_setState(self.model, self.data, np.asarray(state, dtype=float), _STATE)
        self._hold_arm(self.data.ctrl[self._arm_ctrl])
        mujoco.mj_forward(self.model, self.data)
        self._sensor_time = self.data.time

    # -- stepping --------------------------------------------------------------------------
    @property
    def time(self) -> float:
        return float(self.data.time)

    @property
    def timestep(self) -> float:
        return float(self.model.opt.timestep)

    def set_command_latency(self, extra_s: float = 0.0) -> None:
        """Commands reach the actuators `extra_s` later than the cell's fitted latency alone has
        them (a perturbation's added delay, a proxy cell's hidden one); commands in flight are
        dropped. The one place a command's latency is modelled: the same for a trial in-process,
        through the ROS graph and in a recorded cell."""
        if not (math.isfinite(extra_s) and extra_s >= 0.0):
            raise ValueError(f"command latency {extra_s!r} s; expected a finite delay >= 0")
        self.command_latency_s = self.fitted_latency_s + float(extra_s)
        self._delayed.clear()

    def adopt_dynamics(self, command_latency_s: float = 0.0) -> None:
        """The model's arm gains as they are now, and `command_latency_s`, become this twin's own,
        as a dynamics file's would: a perturbation then scales and adds to them (a proxy cell's
        hidden values, written into its model after compiling)."""
        if not (math.isfinite(command_latency_s) and command_latency_s >= 0.0):
            raise ValueError(f"command latency {command_latency_s!r} s; expected a finite delay >= 0")
        m = self.model
        self._servo_gains = (m.actuator_gainprm[self._arm_act, 0].copy(), -m.actuator_biasprm[self._arm_act, 2].copy())
        self.fitted_latency_s = float(command_latency_s)
        self.set_command_latency(0.0)

    def set_actuator_gain_scale(self, scale: float = 1.0) -> None:
        """The arm servos' gains at `scale` times the twin's own: the fitted ones where the scene
        names a dynamics file, else the RobotSpec's (a perturbation scales what was fitted)."""
        kp, kv = self._servo_gains
        write_joint_dynamics(self.model, self._arm_act, self._arm_dof, kp=kp * scale, kv=kv * scale)

    def following_bound(self) -> np.ndarray:
        """How far each arm joint's applied target may lead the joint: FOLLOWING_MARGIN times its
        lag behind a setpoint moving at the velocity limit, from the gains the model holds now
        ((kv + damping) / kp) and the interpolation's period.

        A drive whose torque runs out against an obstacle (a block pressed into the table) or
        against gravity falls behind its setpoints; left to run further ahead, the target would
        push it with all its force and throw it on when it frees. Real drives bound their
        following error for the same reason. The margin keeps the bound out of free motion:
        there, pressing a joint that other joints hold back at full speed while its setpoint
        brakes, it made the joint brake far harder than the limits when the setpoint caught up."""
        m, act = self.model, self._arm_act
        kp = m.actuator_gainprm[act, 0]
        kv = -m.actuator_biasprm[act, 2] + m.dof_damping[self._arm_dof]
        return FOLLOWING_MARGIN * (kv / kp + self.hold_steps * self.timestep) * self.robot.limits.velocity

    def _within_bound(self, targets: np.ndarray, bound: np.ndarray) -> np.ndarray:
        here = self.data.qpos[self._arm_qpos]
        return np.clip(targets, here - bound, here + bound)

    def _hold_arm(self, targets: np.ndarray) -> None:
        """The drives at rest on `targets`: no interpolation under way."""
        self._arm_goal[:] = targets
        self._arm_window[:] = targets

    def set_arm_targets(self, positions: np.ndarray) -> None:
        """Position targets of every arm joint, in `joint_names` order (they reach the actuators
        `command_latency_s` later: the fitted latency and any set by set_command_latency), each
        reached over `hold_steps` physics steps."""
        if self.command_latency_s > 0:
            self._delay(self._arm_ctrl, positions)
        else:
            self._set_arm_goal(positions, self.following_bound())

    def _set_arm_goal(self, positions, bound: np.ndarray) -> None:
        self._arm_goal[:] = positions
        if self.hold_steps == 1:  # no interpolation: the target applies as it comes
            self.data.ctrl[self._arm_ctrl] = self._within_bound(self._arm_goal, bound)

    def set_gripper_openings(self, openings: np.ndarray) -> None:
        if self.command_latency_s > 0:
            self._delay(self._gripper_act, openings)
        else:
            self.data.ctrl[self._gripper_act] = openings

    def set_gripper_forces(self, forces: np.ndarray | None) -> None:
        """Bound each gripper's grip at `forces` (N); NaN, or None for all, restores the scene's own."""
        key = None if forces is None else np.asarray(forces, float).tobytes()  # bytes: NaN equals NaN
        if key is not None and key == self._gripper_forces_set:
            return  # written every control cycle, changed by a command now and then
        self._gripper_forces_set = key
        limit = self._gripper_max_force.copy()
        if forces is not None:
            forces = np.asarray(forces, float)
            given = np.isfinite(forces) & (forces > 0)
            limit[given] = np.minimum(forces[given], limit[given])
        self.model.actuator_forcerange[self._gripper_act, 0] = -limit
        self.model.actuator_forcerange[self._gripper_act, 1] = limit

    def _delay(self, actuators, values) -> None:
        self._delayed.append((self.data.time + self.command_latency_s, actuators, np.array(values, float)))

    def _step_each(self, n: int) -> None:
        """n physics steps, each first applying the delayed commands that have come due and
        moving the arm's actuators one step along their interpolation."""
        model, data, delayed, arm = self.model, self.data, self._delayed, self._arm_ctrl
        bound, window = self.following_bound(), self._arm_window
        for _ in range(n):
            while delayed and delayed[0][0] <= data.time + 1e-9:
                _, actuators, values = delayed.popleft()
                if actuators is arm:
                    self._set_arm_goal(values, bound)
                else:
                    data.ctrl[actuators] = values
            if len(window) > 1:
                window[self._window_at] = self._arm_goal
                self._window_at = (self._window_at + 1) % len(window)
                data.ctrl[arm] = self._within_bound(window.mean(axis=0), bound)
            mujoco.mj_step(model, data)

    def step(self, n: int = 1) -> None:
        model, data = self.model, self.data
        if self.command_latency_s > 0 or self.hold_steps > 1:
            self._step_each(n)
        elif n > 0:
            mujoco.mj_step(model, data, n)
        self._sensor_time = data.time - model.opt.timestep

    def step_through(self, arm_targets: np.ndarray, steps_per_row: int = 1) -> None:
        """Set each row of `arm_targets` (joint_names order) in turn and step `steps_per_row` times after it."""
        model, data, ctrl, arm = self.model, self.data, self.data.ctrl, self._arm_ctrl
        if self.command_latency_s > 0 or self.hold_steps > 1:
            for row in arm_targets:
                self.set_arm_targets(row)
                self._step_each(steps_per_row)
        else:
            bound, within = self.following_bound(), self._within_bound
            for row in arm_targets:
                ctrl[arm] = within(row, bound)
                mujoco.mj_step(model, data, steps_per_row)
        self._sensor_time = data.time - model.opt.timestep

    # -- privileged state --------------------------------------------------------------------
    def joint_sample(self) -> JointSample:
        """Joint state as the sensors sampled it, stamped with the time they sampled it."""
        # Each finger's effort is its gripper's drive force on the opening tendon (N, closing < 0).
        grip = np.repeat(self.data.actuator_force[self._gripper_act], self._fingers)
        effort = np.concatenate([self._arm_effort, grip])
        return JointSample(self._sensor_time, self.state_joint_names, self.position, self.velocity, effort)

    @property
    def arm_positions(self) -> np.ndarray:
        return self.position[: len(self.joint_names)]

    @property
    def arm_velocities(self) -> np.ndarray:
        return self.velocity[: len(self.joint_names)]

    @property
    def gripper_openings(self) -> np.ndarray:
        return self.data.ten_length[self._gripper_tendon].copy()

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {name: (self.object_pos[i].copy(), self.object_quat[i].copy())
                for i, name in enumerate(self.object_names)}

    def object_sizes(self) -> dict[str, np.ndarray]:
        """Each object's bounding-box extents along its own axes (m), as the scene built it."""
        return {o.name: np.array(o.extents) for o in self.scene.objects}

    def displace_object(self, name: str, position) -> None:
        """Put object `name` at `position` (world, m), at rest: what knocking it away does (a
        soak's drill of an intervention)."""
        joint = self.model.joint(f"{name}_free")
        self.data.qpos[joint.qposadr[0]:joint.qposadr[0] + 3] = np.asarray(position, float)
        self.data.qvel[joint.dofadr[0]:joint.dofadr[0] + 6] = 0.0
        mujoco.mj_forward(self.model, self.data)

    def fixture_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Every fixture body's pose (position, quaternion wxyz): bowls, boxes and their doors."""
        return {name: (self.data.body(name).xpos.copy(), self.data.body(name).xquat.copy())
                for f in self.scene.fixtures for name in f.bodies}

    def site_pose(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        site = self.data.site(name)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, site.xmat)
        return site.xpos.copy(), quat

    def contacts(self) -> list[Contact]:
        m, d = self.model, self.data
        out = []
        force = np.zeros(6)
        for i in range(d.ncon):
            c = d.contact[i]
            mujoco.mj_contactForce(m, d, i, force)
            out.append(Contact(body1=m.body(m.geom_bodyid[c.geom1]).name, body2=m.body(m.geom_bodyid[c.geom2]).name,
                               geom1=m.geom(c.geom1).name, geom2=m.geom(c.geom2).name, pos=c.pos.copy(),
                               normal=c.frame[:3].copy(), normal_force=float(force[0]), distance=float(c.dist)))
        return out

    # -- cameras ---------------------------------------------------------------------------
    def camera_resolution(self, camera: str) -> tuple[int, int]:
        width, height = self.model.cam_resolution[self.model.camera(camera).id]
        return int(width), int(height)

    def camera_intrinsics(self, camera: str) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy) in pixels, as camera_info's K states them, for a fovy camera."""
        cam = self.model.camera(camera).id
        width, height = self.camera_resolution(camera)
        fy = (height / 2) / np.tan(np.radians(self.model.cam_fovy[cam]) / 2)
        return float(fy), float(fy), (width - 1) / 2, (height - 1) / 2
