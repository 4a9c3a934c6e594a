"""Rainbow Robotics RB-Y1 (model A): a 6-joint torso, two 7-DoF arms with parallel grippers,
and a pan-tilt head, on a mobile base that the twin holds fixed.

Joint names follow Rainbow's rby1-sdk model (`torso_0..5`, `right_arm_0..6`, `left_arm_0..6`,
`head_0..1`, fingers `gripper_finger_r1/r2`, `gripper_finger_l1/l2`), in the SDK's order.
Kinematics and position / velocity / effort limits are in urdf/rby1.urdf; acceleration limits
are the ones Rainbow's model states (torso 5 rad/s^2, arms 10 rad/s^2). The head's is not
published; 10 rad/s^2 is our choice. Masses are Rainbow's too: torso_1 carries some 60 kg,
and holding it up anywhere in its limits takes up to 522 N m of its 697 N m (the drive's torque
at its current limit, urdf/rby1.urdf says where from), so moving every torso joint at 5 rad/s^2
at once in a leaning pose still asks for more than it has.
"""

from math import cos, radians, sin

from r2s2r.robots.spec import CameraSpec, GripperSpec, JointGroup, RobotSpec

TORSO = tuple(f"torso_{i}" for i in range(6))
RIGHT_ARM = tuple(f"right_arm_{i}" for i in range(7))
LEFT_ARM = tuple(f"left_arm_{i}" for i in range(7))
HEAD = ("head_0", "head_1")

# Position-servo gains: kp = I w^2 for each joint's inertia at home (w = 40-50 rad/s for the torso,
# 50 for the arms, 80 for the wrist roll and the head); kv = 2.2 sqrt(kp I_max) less the joint's
# damping, I_max the joint's largest inertia (mj_fullM's diagonal, armature included) over 3000
# poses within its limits: a damping ratio of at least 1.1 everywhere, so tracking a limited
# setpoint never overshoots its speed (tests/test_twin_servos.py). Steady lag: kv / kp, 25-85 ms.
_ARM_KP = (2400.0, 1600.0, 1200.0, 1000.0, 140.0, 150.0, 75.0)
_ARM_KV = (140.0, 115.0, 56.0, 48.0, 6.1, 6.3, 2.0)


def _arm(side: str, joints: tuple[str, ...]) -> JointGroup:
    s = side[0].upper()
    return JointGroup(
        name=f"{side}_arm",
        joints=joints,
        acceleration_limits=(10.0,) * 7,
        kp=_ARM_KP,
        kv=_ARM_KV,
        damping=(2.0, 2.0, 1.0, 1.0, 0.2, 0.2, 0.1),
        armature=(0.2, 0.2, 0.1, 0.1, 0.02, 0.02, 0.01),
        flange=(f"FT_sensor_{s}", (0.0, 0.0, 0.0)),
        # Between the finger pads, 103 mm below the end-effector frame Rainbow's SDK uses.
        tcp=(f"ee_{side}", (0.0, 0.0, -0.103)),
    )


def _gripper(side: str) -> GripperSpec:
    # Each finger travels 50 mm at 0.05 m/s (Rainbow's limits); the grip force is our choice.
    s = side[0]
    return GripperSpec(name=f"{side}_gripper", joints=(f"gripper_finger_{s}1", f"gripper_finger_{s}2"),
                       opening_range=(0.0, 0.1), max_speed=0.1, max_force=50.0)


def _wrist_camera(side: str) -> CameraSpec:
    # Under the gripper body's inboard edge, 5 cm off its centre line, tilted 0.445 rad toward a
    # point 0.18 m down the gripper past the fingertips; the image's top away from the fingers.
    # Inboard is +y of ee_right, -y of ee_left.
    tilt = 0.445
    if side == "right":
        pos, quat = (0.0, 0.05, -0.075), (cos(tilt / 2), -sin(tilt / 2), 0.0, 0.0)
    else:
        pos, quat = (0.0, -0.05, -0.075), (0.0, 0.0, -sin(tilt / 2), cos(tilt / 2))
    return CameraSpec(name=f"{side}_wrist", width=320, height=240, fovy=70.0, pos=pos, quat=quat,
                      parent=f"ee_{side}")


SPEC = RobotSpec(
    name="rby1",
    description="Rainbow Robotics RB-Y1, torso 6 + two 7-DoF arms + head 2, fixed base",
    urdf="rby1.urdf",
    base_link="base",
    vendor_packages="rby1-sdk (models/rby1a)",
    groups=(
        JointGroup(
            name="torso",
            joints=TORSO,
            acceleration_limits=(5.0,) * 6,
            kp=(40000.0, 40000.0, 30000.0, 10000.0, 10000.0, 5000.0),
            kv=(3300.0, 3400.0, 2150.0, 800.0, 800.0, 410.0),
            damping=(10.0,) * 6,
            armature=(1.0, 1.0, 1.0, 0.5, 0.5, 0.5),
            # The torso carries both arms, and their swing pulls on it most: at the robot's 0.5 its
            # pitch drives saturated under hostile streams (4 of 150 seeds, up to 4.2x); at 0.25
            # none did (docs/safety.md).
            twin_acceleration_share=0.25,
        ),
        _arm("right", RIGHT_ARM),
        _arm("left", LEFT_ARM),
        JointGroup(
            name="head",
            joints=HEAD,
            acceleration_limits=(10.0, 10.0),
            kp=(15.0, 15.0),
            kv=(0.35, 0.35),
            damping=(0.05, 0.05),
            armature=(0.002, 0.002),
        ),
    ),
    # Hostile streams in process (16 seeds) measured up to 0.99x the wrists' limits at 0.6 and one
    # DDS run 1.23x; at 0.5, 0.93x (docs/safety.md).
    twin_acceleration_share=0.5,
    # Rainbow's ready pose (rby1-sdk examples); the head tilted 30 deg down to the workspace (ours).
    home={
        **dict(zip(TORSO, (0.0, radians(45), radians(-90), radians(45), 0.0, 0.0))),
        **dict(zip(RIGHT_ARM, (0.0, radians(-5), 0.0, radians(-120), 0.0, radians(70), 0.0))),
        **dict(zip(LEFT_ARM, (0.0, radians(5), 0.0, radians(-120), 0.0, radians(70), 0.0))),
        **dict(zip(HEAD, (0.0, radians(30)))),
    },
    grippers=(_gripper("right"), _gripper("left")),
    cameras=(
        # The stereo camera on the head mount, looking ahead along the head's x axis.
        CameraSpec(name="head", width=320, height=240, fovy=70.0, pos=(0.055, 0.0, 0.04),
                   lookat=(1.0, 0.0, 0.04), parent="link_head_2"),
        _wrist_camera("right"),
        _wrist_camera("left"),
    ),
    # The SDK's real-time command channel runs at 500 Hz; state is streamed at up to 100 Hz.
    control_rate_hz=500.0,
    state_rate_hz=100.0,
)
