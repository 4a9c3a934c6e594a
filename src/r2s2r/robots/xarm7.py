"""UFACTORY xArm7 with the xArm Gripper.

Joint names follow xarm_ros2 (`joint1..7`). Kinematics and position / velocity / effort limits
are in urdf/xarm7.urdf; the acceleration limit is the xArm controller's ceiling on joint
acceleration (20 rad/s^2, as the xArm SDK bounds set_joint_maxacc). The real arm takes
streamed joint targets (servo mode) at about 250 Hz.
"""

from r2s2r.robots.spec import CameraSpec, GripperSpec, JointGroup, RobotSpec

JOINTS = tuple(f"joint{i}" for i in range(1, 8))

SPEC = RobotSpec(
    name="xarm7",
    description="UFACTORY xArm7, 7-DoF, xArm Gripper",
    urdf="xarm7.urdf",
    base_link="link_base",
    vendor_packages="xarm_ros2 (xarm_description)",
    groups=(
        JointGroup(
            name="arm",
            joints=JOINTS,
            acceleration_limits=(20.0,) * 7,
            # Stiff enough to hold against the 20-50 N m drives, damped (kv / kp = 0.1 s) so the
            # 250 Hz setpoint staircase is smoothed rather than chased.
            kp=(1500.0, 1500.0, 800.0, 800.0, 500.0, 500.0, 300.0),
            kv=(150.0, 150.0, 80.0, 80.0, 50.0, 50.0, 30.0),
            damping=(1.0, 1.0, 0.5, 0.5, 0.5, 0.2, 0.2),
            armature=(0.1, 0.1, 0.05, 0.05, 0.03, 0.03, 0.02),
            flange=("link_eef", (0.0, 0.0, 0.0)),
            tcp=("link_tcp", (0.0, 0.0, 0.0)),
        ),
    ),
    # The urdf's efforts (xarm_description's; UFACTORY publishes no joint torques) leave joint2
    # too little to brake against gravity and the other joints' centrifugal pull at speed: driven
    # by tests/test_twin_servos.py with joint3 at 2.8 rad/s, joint2 saturated and ran on into its
    # stop (at 0.8 of the velocity limits and 0.65 of the accelerations: 1.8x the speed limit,
    # 1.4x the acceleration's); at 0.6 every joint kept within its limits (docs/safety.md).
    twin_velocity_scale=0.6,
    # Tool pointing straight down 0.31 m above the base, 0.36 m in front of it.
    home=dict(zip(JOINTS, (0.0, -0.3, 0.0, 0.6, 0.0, 0.9, 0.0))),
    grippers=(
        # xArm Gripper: 85 mm stroke; force and speed of the same order as the real one.
        GripperSpec(name="gripper", joints=("xarm_gripper_finger_joint1", "xarm_gripper_finger_joint2"),
                    opening_range=(0.0, 0.085), max_speed=0.1, max_force=30.0),
    ),
    cameras=(
        CameraSpec(name="scene", width=320, height=240, fovy=58.0, pos=(1.25, 0.45, 0.85),
                   lookat=(0.3, 0.0, 0.22)),
        # A wrist camera on a stand beside the gripper body, tilted 25 deg in towards the fingers,
        # image up pointing away from the gripper (the fingers show at the bottom).
        CameraSpec(name="wrist", width=320, height=240, fovy=70.0, pos=(0.11, 0.0, 0.0),
                   quat=(0.153, 0.6903, 0.6903, 0.153), parent="xarm_gripper_base_link"),
    ),
    control_rate_hz=250.0,
    state_rate_hz=250.0,
)
