"""Scripted policies: the registry, `hold` and `goto`, chosen by URI or by a policy config file."""

import numpy as np
import pytest

from r2s2r import plugins
from r2s2r.config import ConfigError, Section
from r2s2r.policy import Observation, PolicyError, PolicyMetadata, PolicyRuntime, RuntimeConfig, load_policy
from r2s2r.policy.scripted import HoldPolicy
from r2s2r.robots import get_robot

FR3 = get_robot("franka_fr3")
DEFAULTS = PolicyMetadata.for_robot(FR3)
HOME = FR3.home_positions


def fr3_obs(stamp, q, opening=0.08):
    return Observation(stamp, {"arm": np.asarray(q, float)}, {"gripper": opening})


def test_goto_moves_in_a_straight_line_at_the_speed_limit_and_stops_on_the_goal():
    goal = HOME + np.array([0.3, 0, 0, -0.15, 0, 0, 0])
    policy = load_policy("scripted:goto", DEFAULTS, {"goal": {"arm": goal.tolist()}, "max_speed": 0.5,
                                                   "control_rate_hz": 10.0, "chunk_length": 8})
    assert policy.metadata.action.joints == {"arm": 7} and policy.metadata.action.grippers == ()
    chunk = policy.act(fr3_obs(2.0, HOME))
    assert chunk.stamp == 2.0 and chunk.dt == pytest.approx(0.1) and chunk.length == 8
    # joint1 has 0.3 rad to go at 0.5 rad/s: 0.6 s, so 0.05 rad per 0.1 s step, joint4 half of that.
    steps = np.minimum(np.arange(1, 9) * 0.05 / 0.3, 1.0)
    np.testing.assert_allclose(chunk.joints["arm"], HOME + steps[:, None] * (goal - HOME), atol=1e-12)
    np.testing.assert_allclose(chunk.joints["arm"][-3:], np.repeat(goal[None], 3, axis=0), atol=1e-12)
    # Planned from wherever the robot is: at the goal it stays there.
    np.testing.assert_allclose(policy.act(fr3_obs(3.0, goal)).joints["arm"], np.repeat(goal[None], 8, 0))


def test_goto_with_a_gripper_goal_commands_the_opening():
    policy = load_policy("scripted:goto", DEFAULTS, {"goal": {"arm": HOME.tolist()}, "gripper": {"gripper": 0.02},
                                                   "max_gripper_speed": 0.1, "control_rate_hz": 10.0})
    chunk = policy.act(fr3_obs(0.0, HOME, opening=0.08))
    np.testing.assert_allclose(chunk.grippers["gripper"][:7], [0.07, 0.06, 0.05, 0.04, 0.03, 0.02, 0.02])


@pytest.mark.parametrize("params,match", [
    ({}, "goal: expected a mapping of joint group names"),
    ({"goal": {"left_arm": [0.0] * 7}}, "goal.left_arm: expected one of the robot's joint groups: arm"),
    ({"goal": {"arm": [0.0] * 6}}, "goal.arm: expected a list of 7 finite numbers"),
    ({"goal": {"arm": [0.0] * 7}, "gripper": {"hand": 0.01}}, "gripper.hand: expected one of the robot's grippers"),
    ({"goal": {"arm": [0.0] * 7}, "speed": 1.0}, "speed: expected one of the keys"),
])
def test_goto_parameters_are_checked_by_name(params, match):
    with pytest.raises(ConfigError, match=match):
        load_policy("scripted:goto", DEFAULTS, params)


def test_hold_holds_what_it_first_saw_until_reset():
    policy = load_policy("scripted:hold", DEFAULTS)
    q0 = HOME + 0.1
    np.testing.assert_allclose(policy.act(fr3_obs(0.0, q0, 0.03)).to_array(DEFAULTS.action),
                               np.repeat([[*q0, 0.03]], DEFAULTS.chunk_length, 0))
    assert np.allclose(policy.act(fr3_obs(0.5, HOME)).joints["arm"], q0)
    policy.reset()
    assert np.allclose(policy.act(fr3_obs(1.0, HOME)).joints["arm"], HOME)
    with pytest.raises(PolicyError, match="scripted:hold needs the robot's joint layout"):
        load_policy("scripted:hold")


def make_wave(params: Section, defaults):
    return HoldPolicy(defaults)


def test_scripted_policies_are_plugins_or_factories_named_by_module_path():
    assert plugins.names("scripted_policies") == ["aloha_cube_handover", "franka_block_in_bowl",
                                                  "franka_cup_in_microwave", "goto", "hold"]
    assert isinstance(load_policy("scripted:hold", DEFAULTS), HoldPolicy)
    # A factory in a module no package registers, named by its module path.
    assert isinstance(load_policy(f"scripted:{__name__}:make_wave", DEFAULTS), HoldPolicy)
    with pytest.raises(PolicyError, match="unknown scripted policy 'wave'; expected one of aloha_cube_handover, "
                                          ".*goto, hold \\(or scripted:package.module:FACTORY\\)"):
        load_policy("scripted:wave", DEFAULTS)
    with pytest.raises(PolicyError, match="module r2s2r.policy.scripted defines no scripted policy factory 'wave'"):
        load_policy("scripted:r2s2r.policy.scripted:wave", DEFAULTS)
    with pytest.raises(PolicyError, match="module 'no_such_lab.policies' cannot be imported"):
        load_policy("scripted:no_such_lab.policies:wave", DEFAULTS)


def test_policy_config_file_carries_uri_params_and_runtime(tmp_path):
    config = tmp_path / "goto.yaml"
    config.write_text("uri: scripted:goto\nparams:\n  goal: {arm: [0, -0.5, 0, -2, 0, 1.6, 0.8]}\n"
                      "runtime: {deadline_s: 0.25}\n")
    policy = load_policy(str(config), DEFAULTS)
    assert policy.goal.tolist() == [0, -0.5, 0, -2, 0, 1.6, 0.8]
    # Parameters given at load time (policy_node's policy_params) win over the file's.
    policy = load_policy(str(config), DEFAULTS, {"goal": {"arm": HOME.tolist()}})
    assert np.allclose(policy.goal, HOME)
    bad = tmp_path / "bad.yaml"
    bad.write_text("uri: scripted:goto\nparameters: {}\n")
    with pytest.raises(ConfigError, match="parameters: expected one of the keys"):
        load_policy(str(bad), DEFAULTS)
    with pytest.raises(PolicyError, match="is not a policy URI or config file"):
        load_policy("pytorch:model.pt")


def test_goto_drives_the_twin_in_process_through_the_runtime():
    """The evaluation engine's path: the same policy and runtime on SimHardware, no ROS graph."""
    from r2s2r.hardware.loop import ControlLoop
    from r2s2r.hardware.sim import SimHardware
    from r2s2r.policy import JointLayout
    from r2s2r.sim.scene import Scene

    hardware = SimHardware(Scene(robot=FR3.name), seed=0)
    hardware.on_configure()
    loop = ControlLoop(hardware, 500.0)
    goal = HOME + np.array([0.2, -0.2, 0.1, 0.2, -0.1, 0.1, 0.2])
    policy = load_policy("scripted:goto", DEFAULTS, {"goal": {"arm": goal.tolist()}, "max_speed": 1.0,
                                                   "control_rate_hz": 20.0})
    runtime = PolicyRuntime(policy, RuntimeConfig(asynchronous=False))
    layout = JointLayout.from_robot(FR3)
    for _ in range(300):  # 1.5 s of twin time, a command every 5 ms
        sample = hardware.read()
        joints, grippers = layout.split(sample)
        command = runtime.step(hardware.now, Observation(sample.stamp, joints, grippers))
        loop.controller.command_positions("arm", command.joints["arm"], hardware.now)
        loop.run_until(hardware.now + 0.005)
    assert np.max(np.abs(loop.positions() - goal)) < 1e-3


def test_a_scripted_uri_query_gives_the_params_and_a_config_overrides_them(tmp_path):
    policy = load_policy("scripted:goto?goal={arm: [0, -0.5, 0, -2, 0, 1.6, 0.8]}&max_speed=0.25", DEFAULTS)
    assert policy.goal.tolist() == [0, -0.5, 0, -2, 0, 1.6, 0.8] and policy.speed[0] == 0.25
    config = tmp_path / "goto.yaml"
    config.write_text("uri: scripted:goto?max_speed=0.25\nparams:\n  goal: {arm: [0, -0.5, 0, -2, 0, 1.6, 0.8]}\n"
                      "  max_speed: 0.5\n")
    assert load_policy(str(config), DEFAULTS).speed[0] == 0.5
    # A key the policy does not take is refused by name, as in a config's params.
    with pytest.raises(ConfigError, match="speed: expected one of the keys"):
        load_policy("scripted:goto?goal={arm: [0, 0, 0, -2, 0, 1.6, 0.8]}&speed=1", DEFAULTS)
    with pytest.raises(PolicyError, match="its query 'max_speed' is not KEY=VALUE pairs"):
        load_policy("scripted:goto?max_speed", DEFAULTS)
