"""The Franka twin over real DDS, from a separate process: `r2s2r up config/stacks/franka_fr3_sim.yaml`,
then a client commands it as any ros2_control user would."""

import math
import time

import mujoco
import numpy as np
import pytest
from sensor_msgs.msg import CameraInfo, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import Topics, convert, qos
from r2s2r.contract.tf import TFMessage
from r2s2r.robots import get_robot
from r2s2r.robots.model import build_robot_spec
from r2s2r.robots.transforms import Transform, link_poses
from r2s2r.sim.scene import load_scene
from tests.test_transforms import assert_same_poses, twin_poses

FR3 = get_robot("franka_fr3")
ARM = FR3.group("arm").joints
HOME = FR3.home_positions


@pytest.fixture(scope="module")
def twin():
    from tests.ros_helpers import StackProcess
    proc = StackProcess("config/stacks/franka_fr3_sim.yaml")
    from r2s2r.nodes.client import RobotClient
    client = RobotClient("dds_test_client", cameras=("scene",))
    client.wait_for_joint_states(60)
    for topic, kind in ((Topics.position_commands("arm"), Float64MultiArray),
                        (Topics.joint_trajectory("arm"), JointTrajectory)):
        assert client.wait_for_subscriber(topic, kind, 30)
    yield client, proc
    client.close()
    assert proc.stop() < 5.0


def go_home(client):
    """Home and settled (well inside the 0.1 mrad the hold checks use)."""
    client.send_positions("arm", HOME)
    assert client.wait_until_at(ARM, HOME, 2e-5, 15)


def test_joint_states_carry_every_joint_at_the_state_rate(twin):
    client, _ = twin
    sample = client.wait_for_joint_states()
    assert sample.names == ARM + FR3.gripper_joint_names
    # The spacing of the stamps, on the twin's own clock: a busy machine (real-time factor < 1)
    # cannot blur it, nor can messages this client drops when its executor falls behind (it keeps
    # the last 10, so a loaded CI machine lost 8 % of them and a count read 231 Hz); the median
    # spacing is one period unless most are lost.
    stamps = []

    def on_joints(msg):
        stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
    subscription = client.node.create_subscription(JointState, Topics.JOINT_STATES, on_joints, qos.STATE)
    try:
        assert client.wait_for(lambda: len(stamps) >= 200, 30), len(stamps)
    finally:
        client.node.destroy_subscription(subscription)
    spacing = np.diff(np.unique(stamps))
    assert 1.0 / np.median(spacing) == pytest.approx(FR3.state_rate_hz, rel=0.05), spacing


def test_trajectory_arrives_within_1_mrad(twin):
    client, _ = twin
    go_home(client)
    mid = HOME + np.array([0.3, 0.2, -0.2, 0.25, 0.2, -0.2, 0.3])
    goal = HOME + np.array([-0.2, 0.3, 0.1, 0.4, -0.1, 0.2, -0.4])
    client.send_trajectory("arm", ARM, [1.0, 2.0], [mid, goal])
    assert client.wait_until_at(ARM, goal, 1e-3, 15)
    time.sleep(0.3)
    assert np.max(np.abs(client.positions(ARM) - goal)) < 1e-3


def test_streaming_targets_and_gripper(twin):
    client, _ = twin
    target = HOME + np.array([0.1, -0.1, 0.1, -0.1, 0.1, 0.1, -0.1])
    client.send_positions("arm", target)
    client.send_gripper("gripper", 0.03)
    assert client.wait_until_at(ARM, target, 1e-3, 15)
    fingers = FR3.gripper_joint_names
    assert client.wait_for(lambda: abs(client.positions(fingers).sum() - 0.03) < 2e-3, 10)


@pytest.mark.parametrize("bad,reason", [
    (lambda c: c.send_positions("arm", HOME[:6]), "got 6 values, expected 7"),
    (lambda c: c.send_positions("arm", np.where(np.arange(7) == 2, math.nan, HOME)), "expected finite numbers"),
    (lambda c: c.send_positions("arm", np.where(np.arange(7) == 0, math.inf, HOME)), "expected finite numbers"),
    (lambda c: c.send_trajectory("arm", ("joint1",) + ARM[1:], [1.0], [HOME + 0.3]), "unknown joint names"),
    (lambda c: c.send_positions("arm", HOME + np.array([5.0, 0, 0, 0, 0, 0, 0])), "outside the joint limits"),
    (lambda c: c.send_gripper("gripper", [0.01, 0.02]), "expected 1 (the opening in metres)"),
])
def test_bad_commands_are_rejected_reported_and_the_arm_holds(twin, bad, reason):
    client, proc = twin
    go_home(client)
    before = client.positions(ARM)
    bad(client)
    assert client.wait_for(lambda: reason in client.diagnostic_values().get("last_rejection", ""), 5), \
        client.diagnostic_values()
    time.sleep(0.3)
    assert np.max(np.abs(client.positions(ARM) - before)) < 1e-4
    assert proc.wait_for_line(reason, 5)  # and in the node's log
    assert proc.proc.poll() is None  # the node is alive


def test_estop_latches_until_enable(twin):
    client, _ = twin
    go_home(client)
    client.estop(True)
    assert client.wait_for(lambda: client.diagnostic_values().get("mode") == "estop", 5)
    client.send_positions("arm", HOME + 0.2)
    time.sleep(0.5)
    assert np.max(np.abs(client.positions(ARM) - HOME)) < 1e-3
    client.estop(False)  # releasing the button does not clear the latch
    time.sleep(0.2)
    assert client.diagnostic_values().get("mode") == "estop"
    assert client.enable(True).success
    go_home(client)


def test_reset_puts_the_scene_back(twin):
    client, _ = twin
    client.send_positions("arm", HOME + 0.2)
    time.sleep(0.5)
    response = client.reset()
    assert response.success
    assert client.wait_until_at(ARM, HOME, 1e-6, 5)


def test_camera_image_info_and_object_poses(twin):
    client, _ = twin
    from geometry_msgs.msg import PoseArray
    from rosgraph_msgs.msg import Clock
    received = {}
    node = client.node
    from r2s2r.contract import qos
    node.create_subscription(CameraInfo, Topics.camera_info("scene"), lambda m: received.setdefault("info", m), qos.SENSOR)
    node.create_subscription(PoseArray, Topics.OBJECT_POSES, lambda m: received.setdefault("poses", m), qos.TWIN)
    node.create_subscription(Clock, Topics.CLOCK, lambda m: received.setdefault("clock", m), qos.CLOCK)
    assert client.wait_for(lambda: len(received) == 3 and client.image("scene") is not None, 10), received.keys()
    image = client.image("scene")
    assert image.shape == (240, 320, 3)
    info = received["info"]
    assert (info.width, info.height) == (320, 240)
    assert info.header.frame_id == "scene_optical_frame"
    assert info.k[0] == pytest.approx(120 / math.tan(math.radians(58) / 2), rel=1e-6)
    assert len(received["poses"].poses) == 2


def test_a_forward_command_is_held_and_a_silent_stream_is_braked(twin):
    # 1.5 rad on joint 1 takes the FR3 longer than the 0.5 s watchdog: one command on the
    # forward topic gets there (ros2_control's forward_command_controller holds it), the same
    # one on the streaming topic stops short once no other follows.
    client, _ = twin
    target = HOME[:7] + np.array([1.5, 0, 0, 0, 0, 0, 0])
    for streaming in (False, True):
        go_home(client)
        client.send_positions("arm", target, streaming=streaming)
        arrived = client.wait_until_at(ARM, target, 1e-3, 5)
        assert arrived != streaming
        if streaming:
            stopped = client.positions(ARM)
            time.sleep(0.3)
            assert np.max(np.abs(client.positions(ARM) - stopped)) < 1e-3  # braked and holding
            assert 0.3 < stopped[0] - HOME[0] < 1.4


def test_tf_and_the_robot_description_on_the_live_graph(twin):
    """A twin's /tf_static (latched) and /tf compose into every link's pose as the twin's own
    kinematics puts it at the joint_states published; its cameras and objects are frames too."""
    client, _ = twin
    go_home(client)
    robot = FR3
    scene = load_scene("config/scenes/franka_table.yaml")
    static, moving, description = [], [], []
    client.node.create_subscription(TFMessage, Topics.TF_STATIC, static.append, qos.TF_STATIC)
    client.node.create_subscription(TFMessage, Topics.TF, moving.append, qos.TF)
    client.node.create_subscription(String, Topics.ROBOT_DESCRIPTION, description.append, qos.LATCHED)
    assert client.wait_for(lambda: static and len(moving) > 5 and description, 30), (len(static), len(moving))
    assert description[0].data == open(robot.urdf_path).read()

    def transform(t) -> Transform:
        r, p = t.transform.rotation, t.transform.translation
        return Transform(t.header.frame_id, t.child_frame_id, np.array([p.x, p.y, p.z]),
                         np.array([r.x, r.y, r.z, r.w]))
    frames = {t.child_frame_id: transform(t) for msg in static for t in msg.transforms}
    cameras = {c.name for c in scene.all_cameras()}
    assert cameras and all({f"{c}_link", f"{c}_optical_frame"} <= set(frames) for c in cameras), sorted(frames)
    # The arm holds still at home: the newest /tf and joint_states describe the same pose.
    latest = [transform(t) for t in moving[-1].transforms]
    assert {o.name for o in scene.objects} <= {t.child for t in latest if t.parent == "world"}
    # With them, each object's size as the scene builds it (what a skill rule's condition perceives).
    sizes = []
    client.node.create_subscription(String, Topics.OBJECT_SIZES, sizes.append, qos.TWIN)
    assert client.wait_for(lambda: sizes, 10)
    announced = convert.object_sizes(sizes[-1])
    assert set(announced) == {o.name for o in scene.objects}
    for obj in scene.objects:
        np.testing.assert_allclose(announced[obj.name], obj.extents)
    assert client.wait_for(lambda: np.nanmax(np.abs(client.joints.velocity)) < 1e-3, 10)  # fingers too
    count = len(moving)
    assert client.wait_for(lambda: len(moving) > count, 10)
    latest = [transform(t) for t in moving[-1].transforms]
    joints = client.joints
    ours = link_poses(list(frames.values()) + latest, "world")
    model = build_robot_spec(robot).compile()
    kinematics = twin_poses(robot, model, mujoco.MjData(model), dict(zip(joints.names, joints.position)))
    assert_same_poses(ours, kinematics, [model.body(b).name for b in range(1, model.nbody)])
