"""Every registered robot's model: compiles, holds home, tracks a step within its limits,
has no self-collision at home, and offers the sites and actuators the contract promises.

Parametrised over the registry, so a robot added later is checked without a new test.
"""

import mujoco
import numpy as np
import pytest

from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.robots import registry
from r2s2r.robots.model import build_model, home_ctrl, home_qpos
from r2s2r.sim.scene import Scene

ROBOTS = sorted(registry())


@pytest.fixture(params=ROBOTS)
def robot(request):
    return registry()[request.param]


def test_model_compiles_with_contract_sites_and_actuators(robot):
    model = build_model(robot)
    for group in robot.groups:
        for joint in group.joints:
            assert model.actuator(joint).trntype == mujoco.mjtTrn.mjTRN_JOINT
        if group.flange is not None:
            assert model.site(f"{group.name}_flange").id >= 0
            assert model.site(f"{group.name}_tcp").id >= 0
    for gripper in robot.grippers:
        act = model.actuator(gripper.name)
        assert tuple(act.ctrlrange) == pytest.approx(gripper.opening_range)
    # Joint names are unique across groups, so two arms never share a name.
    assert len(set(robot.joint_names + robot.gripper_joint_names)) == len(robot.joint_names + robot.gripper_joint_names)


def test_no_self_collision_at_home(robot):
    model = build_model(robot)
    data = mujoco.MjData(model)
    data.qpos[:] = home_qpos(robot, model)
    mujoco.mj_forward(model, data)
    pairs = [(model.body(model.geom_bodyid[c.geom1]).name, model.body(model.geom_bodyid[c.geom2]).name)
             for c in data.contact[: data.ncon]]
    assert pairs == []


def test_holds_home_under_gravity_for_5_s(robot):
    model = build_model(robot)
    data = mujoco.MjData(model)
    data.qpos[:] = home_qpos(robot, model)
    data.ctrl[:] = home_ctrl(robot, model)
    mujoco.mj_forward(model, data)
    adr = [model.joint(j).qposadr[0] for j in robot.joint_names]
    start = data.qpos[adr].copy()
    worst = 0.0
    for _ in range(int(5.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
        worst = max(worst, float(np.max(np.abs(data.qpos[adr] - start))))
    assert worst < 1e-3, f"drifted {worst * 1e3:.3f} mrad from home"


def _clear_step(hw, robot, group, index, step):
    """`step` from where the robot stands, halved (at most twice) until the way there touches
    nothing and the pose there needs at most half of each joint's effort against gravity: 0.4 rad
    on every joint would put ALOHA's fingers into the table its arms stand on."""
    model, limits = hw.twin.model, robot.limits
    probe = mujoco.MjData(model)
    adr = [model.joint(j).qposadr[0] for j in robot.joint_names]
    dof = [model.joint(j).dofadr[0] for j in robot.joint_names]
    start = hw.twin.arm_positions.copy()
    for scale in (1.0, 0.5, 0.25):
        target = np.clip(start[index] + scale * step, limits.lower[index] + 1e-3, limits.upper[index] - 1e-3)
        for s in np.linspace(0.0, 1.0, 6):
            probe.qpos[:] = hw.twin.data.qpos
            probe.qpos[np.array(adr)[index]] = start[index] + s * (target - start[index])
            mujoco.mj_forward(model, probe)
            if probe.ncon or np.any(np.abs(probe.qfrc_bias[dof]) > 0.5 * limits.effort):
                break
        else:
            return target
    raise AssertionError(f"{group}: even a quarter of the step from home touches something or strains a joint")


def test_step_is_tracked_within_velocity_limits(robot):
    hw = SimHardware(Scene(robot=robot.name, table=None, robot_cameras=False))
    hw.on_configure()
    loop = ControlLoop(hw)
    limits = robot.limits
    vmax = limits.velocity
    for group in robot.groups:
        span = limits.upper[[robot.joint_names.index(j) for j in group.joints]] - \
            limits.lower[[robot.joint_names.index(j) for j in group.joints]]
        # A step of 0.4 rad (or a fifth of the range) on every joint of the group, inside the limits,
        # made smaller where the robot could not hold it.
        index = [robot.joint_names.index(j) for j in group.joints]
        target = _clear_step(hw, robot, group.name, index, np.minimum(0.4, span / 5))
        peak = np.zeros(len(robot.joint_names))
        end = hw.now + 3.0
        while hw.now < end:  # streamed, as a client does: one command would stop at the watchdog (0.5 s)
            loop.controller.command_positions(group.name, target, hw.now)
            loop.cycle()
            peak = np.maximum(peak, np.abs(hw.twin.arm_velocities))
        assert np.all(peak <= vmax * 1.02), f"{group.name}: peak {peak} over limits {vmax}"
        reached = hw.twin.arm_positions[index]
        assert np.max(np.abs(reached - target)) < 1e-3
        # Stepping one group left every other group where it was.
        others = [i for i in range(len(robot.joint_names)) if i not in index]
        if others:
            assert np.max(np.abs(hw.twin.arm_positions[others] - loop.controller.limiter.position[others])) < 2e-3
        # Back where it started, so that every group steps from home: RB-Y1's torso, 0.4 rad along
        # on every joint, leans its chest over its thighs and leaves its arms no room to step.
        loop.controller.command_positions(group.name, robot.home_positions[index], hw.now)
        loop.run_until(hw.now + 2.0)
