"""Proxy-real cells (real2sim.proxy_cell): the truth each shipped cell hides, the effects outside
the twin's model class, bad cell files refused by name, and `r2s2r proxy up` served and recorded
over DDS as a real cell's stack is."""

import signal

import numpy as np
import pytest

from r2s2r.config import ConfigError
from r2s2r.contract.names import Topics
from r2s2r.contract.types import JointCommand
from r2s2r.hardware.base import HardwareError
from r2s2r.real2sim.proxy_cell import ProxyHardware, load_cell
from r2s2r.robots import get_robot
from r2s2r.sim.twin import Twin

CELLS = ["block_in_bowl_laggy", "block_in_bowl_stiff", "block_in_bowl_worn", "cube_handover_worn"]


def test_the_shipped_cells_cover_both_tasks():
    tasks = [load_cell(name).task for name in CELLS]
    assert tasks.count("franka_block_in_bowl") >= 3 and tasks.count("aloha_cube_handover") >= 1


@pytest.mark.parametrize("name", CELLS)
def test_each_cell_hides_its_values_and_effects_from_the_calibration(name):
    cell = load_cell(name)
    robot = get_robot(cell.scene.robot)
    hardware = ProxyHardware(robot, {"cell": name})
    hardware.on_configure()
    twin, nominal = hardware.twin, Twin(cell.scene)
    m, n = twin.model, nominal.model
    # The hidden gains: a group's kp_scale multiplies its joints' position gains.
    for key, value in cell.hidden.items():
        if key.endswith(".kp_scale"):
            group = robot.group(key.split(".")[0])
            act = m.actuator(group.joints[0]).id
            assert m.actuator_gainprm[act, 0] == pytest.approx(value * n.actuator_gainprm[act, 0])
    assert twin.command_latency_s == pytest.approx(cell.hidden["latency_s"])
    for obj, shift in cell.effects.off_centre_mass.items():
        assert m.body_ipos[m.body(obj).id] - n.body_ipos[n.body(obj).id] == pytest.approx(np.asarray(shift))
    # Each camera is rendered from off its calibration; /tf_static publishes the calibration.
    view = hardware.calibrated_view()
    for cam, effects in cell.effects.cameras.items():
        moved = m.cam_pos[m.camera(cam).id] - view.model.cam_pos[view.model.camera(cam).id]
        assert moved == pytest.approx(np.asarray(effects.position_error))
        assert np.allclose(view.model.cam_pos[view.model.camera(cam).id], n.cam_pos[n.camera(cam).id])
    # Joint states come quantised to the encoder's resolution.
    sample = hardware.read()
    steps = sample.position / cell.effects.encoder_resolution
    assert np.allclose(steps, np.round(steps), atol=1e-6)


def test_backlash_makes_a_reversal_take_up_the_play_first():
    hardware = ProxyHardware(get_robot("franka_fr3"), {"cell": "block_in_bowl_laggy"})
    hardware.on_configure()
    play = hardware.cell.effects.backlash
    names = hardware.twin.joint_names
    start = hardware.twin.joint_sample().positions_of(names)
    arm = hardware.twin._arm_act

    def drive():
        """Where the drives hold, once the cell's latency has passed."""
        hardware.advance(int(round(0.06 / hardware.timestep)))
        return hardware.twin.data.ctrl[arm].copy()
    hardware.write(JointCommand(names, start), np.zeros(1))
    assert drive() == pytest.approx(start)
    ahead = start + 0.02
    hardware.write(JointCommand(names, ahead), np.zeros(1))
    assert drive() == pytest.approx(ahead - play / 2)  # pushed from behind: it trails by half the play
    hardware.write(JointCommand(names, ahead - play / 2), np.zeros(1))
    assert drive() == pytest.approx(ahead - play / 2)  # a reversal within the play moves nothing
    hardware.write(JointCommand(names, start), np.zeros(1))
    assert drive() == pytest.approx(start + play / 2)


def test_camera_effects_change_what_the_camera_delivers():
    hardware = ProxyHardware(get_robot("franka_fr3"), {"cell": "block_in_bowl_stiff"})
    hardware.on_configure()
    grey = np.full((48, 64, 3), 120, np.uint8)
    out = hardware.camera_effects("scene", grey)
    c = hardware.cell.effects.cameras["scene"]
    assert out.shape == grey.shape and out.dtype == np.uint8
    means = out.reshape(-1, 3).mean(axis=0)
    assert means == pytest.approx(120 * c.exposure * np.asarray(c.colour), abs=1.0)
    assert out.reshape(-1, 3).std(axis=0).min() > 0.5 * c.noise  # noisy, not a flat grey
    assert hardware.camera_effects("wrist", grey) is grey  # a camera the cell leaves alone


@pytest.mark.parametrize("text, match", [
    ("task: franka_block_in_bowl\nhidden: {arm.kp_scal: 1.1}\n", "hidden.arm.kp_scal: expected a parameter of the twin"),
    ("task: franka_block_in_bowl\nhidden: {arm.kp_scale: 50}\n", r"hidden.arm.kp_scale: expected a value within"),
    ("task: franka_block_in_bowl\neffects: {cameras: {wrist: {noise: 2}}}\n",
     "effects.cameras.wrist: expected one of the cameras fixed in the cell: scene"),
    ("task: franka_block_in_bowl\neffects: {off_centre_mass: {bowl: [0, 0, 0]}}\n",
     "effects.off_centre_mass.bowl: expected one of the scene's objects: block"),
    ("task: franka_block_in_bowl\neffects: {backlash: -1}\n", "effects.backlash"),
    ("task: stacking\n", "task: expected one of aloha_cube_handover"),
    ("hidden: {}\n", "exactly one of 'task'"),
])
def test_a_bad_cell_file_is_refused_naming_the_key(tmp_path, text, match):
    path = tmp_path / "cell.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as error:
        load_cell(path)
    assert str(path) in str(error.value)


def test_the_backend_needs_a_cell_of_its_robot():
    with pytest.raises(HardwareError, match="needs the setting proxy.cell"):
        ProxyHardware(get_robot("franka_fr3"), {})
    with pytest.raises(HardwareError, match="is a aloha cell; this driver's robot is franka_fr3"):
        ProxyHardware(get_robot("franka_fr3"), {"cell": "cube_handover_worn"})


def test_a_proxy_driver_checks_commands_in_the_cells_own_scene():
    from rclpy.parameter import Parameter

    from r2s2r.nodes.driver_node import DriverNode
    from r2s2r.nodes.runtime import PrivateGraph
    with PrivateGraph() as graph:
        node = graph.own(DriverNode(context=graph.context, parameter_overrides=[
            Parameter("robot", value="franka_fr3"), Parameter("backend", value="proxy"),
            Parameter("proxy.cell", value="block_in_bowl_stiff"), Parameter("camera_rate_hz", value=0.0)]))
        # No scene parameter, as `r2s2r proxy up` starts it: the collision checks know the table and bowl.
        assert [o.name for o in node.driver.cell.objects] == ["block"]
        assert [f.name for f in node.driver.cell.fixtures] == ["bowl"] and node.driver.cell.table is not None


def test_proxy_up_serves_the_cell_over_dds_and_it_records_as_a_real_cell(stack_process, ros_client, tmp_path):
    from r2s2r.data.episode import load_episode
    cell = load_cell("block_in_bowl_worn")
    stack = stack_process("block_in_bowl_worn", command=("proxy", "up"))
    client = ros_client(cameras=("scene",))
    names = get_robot("franka_fr3").joint_names
    assert client.wait_for(lambda: client.joints is not None and client.image("scene") is not None, 90), stack.output
    steps = client.positions(names) / cell.effects.encoder_resolution
    assert np.allclose(steps, np.round(steps), atol=1e-6)  # measured through the encoders
    out = tmp_path / "proxy.mcap"
    recorder = stack_process("block_in_bowl_worn", command=("record", "--out", str(out), "--cameras", "scene",
                                                            "--no-depth", "--stack"))
    # Commands while it records (a bag without one is no episode): once the recorder has had its
    # first joint_states, command and image (discovery on a loaded machine takes seconds, and
    # each topic matches on its own), sixty more commands, then Ctrl-C.
    here = client.positions(names)
    firsts = [f"first message on {t}" for t in (Topics.JOINT_STATES, Topics.position_commands("arm"),
                                                Topics.camera_image("scene"))]
    sent_after = 0

    def command_and_count() -> bool:
        nonlocal sent_after
        client.send_positions("arm", here)
        if all(any(f in line for line in list(recorder.lines)) for f in firsts):
            sent_after += 1
        return sent_after >= 60 or recorder.proc.poll() is not None

    assert client.wait_for(command_and_count, 120, poll=0.05), recorder.output
    recorder.stop(signal.SIGINT, timeout=60)
    assert recorder.proc.returncode == 0, recorder.output
    episode = load_episode(out)
    assert len(episode.joints.times) > 100 and len(episode.cameras["scene"].rgb_times) >= 5
    recorded = episode.joints.position[:, episode.joints.columns(names)] / cell.effects.encoder_resolution
    assert np.allclose(recorded, np.round(recorded), atol=1e-6)


def test_a_fit_on_a_cell_the_twin_cannot_follow_says_so(tmp_path):
    # Backlash and quantised encoders: no parameter of the twin reproduces them, the misfit is
    # correlated in time, and the fit must not present its values as the cell's own.
    from r2s2r.data.episode import load_episode
    from r2s2r.real2sim.proxy import ProxyCell, excitation_script
    from r2s2r.real2sim.sysid import fit
    cell = load_cell("block_in_bowl_laggy")
    path = tmp_path / "excitation.mcap"
    ProxyCell.from_config(cell, seed=5).record(excitation_script(get_robot("franka_fr3"), 2.0, seed=5), path, 2.2)
    result = fit(cell.scene, [load_episode(path)], ["arm.kp_scale", "arm.damping_scale"], global_iterations=4,
                 use=("position", "velocity", "effort"), starts=2)
    assert "cannot follow this cell" in result.adequacy
    assert any("does not survive a bootstrap" in p.why for p in result.parameters)
    assert all(p.interval >= 1.5 * p.interval_curvature for p in result.parameters)
