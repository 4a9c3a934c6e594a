"""Franka Research 3 with the Franka Hand.

Joint names follow franka_ros2 (`fr3_joint1..7`, `fr3_finger_joint1/2`). Kinematics and
position / velocity / effort limits are in urdf/franka_fr3.urdf; acceleration limits are the
FR3 datasheet's (10 rad/s^2 per joint, as libfranka's rate limiter uses).
"""

from math import pi

from r2s2r.robots.spec import CameraSpec, GripperSpec, JointGroup, RobotSpec

JOINTS = tuple(f"fr3_joint{i}" for i in range(1, 8))

SPEC = RobotSpec(
    name="franka_fr3",
    description="Franka Research 3, 7-DoF, Franka Hand",
    urdf="franka_fr3.urdf",
    base_link="fr3_link0",
    vendor_packages="franka_ros2 (franka_description)",
    groups=(
        JointGroup(
            name="arm",
            joints=JOINTS,
            acceleration_limits=(10.0,) * 7,
            kp=(4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0),
            kv=(450.0, 450.0, 350.0, 350.0, 200.0, 200.0, 200.0),
            damping=(1.0,) * 7,
            armature=(0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05),
            flange=("fr3_link8", (0.0, 0.0, 0.0)),
            tcp=("fr3_hand_tcp", (0.0, 0.0, 0.0)),
        ),
    ),
    # franka_ros2's ready pose.
    twin_acceleration_share=0.85,
    home=dict(zip(JOINTS, (0.0, -pi / 4, 0.0, -3 * pi / 4, 0.0, pi / 2, pi / 4))),
    grippers=(
        GripperSpec(name="gripper", joints=("fr3_finger_joint1", "fr3_finger_joint2"),
                    opening_range=(0.0, 0.08), max_speed=0.1, max_force=70.0),
    ),
    cameras=(
        CameraSpec(name="scene", width=320, height=240, fovy=58.0, pos=(1.55, 0.0, 0.95),
                   lookat=(0.35, 0.0, 0.3)),
        # A wrist camera on the hand, looking along the fingers.
        CameraSpec(name="wrist", width=320, height=240, fovy=70.0, pos=(0.065, 0.0, 0.02),
                   quat=(0.0, 1.0, 0.0, 0.0), parent="fr3_hand"),
    ),
    control_rate_hz=1000.0,
    state_rate_hz=250.0,
)
