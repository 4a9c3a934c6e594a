"""ALOHA: two ViperX 300 6-DoF follower arms facing each other across a table, with grippers.

Joint names are Interbotix's (`waist`, `shoulder`, `elbow`, `forearm_roll`, `wrist_angle`,
`wrist_rotate`, fingers `left_finger` / `right_finger`) prefixed `left_` / `right_`, so the two
arms never share a name. Kinematics, mounting and position / velocity / effort limits are in
urdf/aloha.urdf. Interbotix publishes no acceleration limits; 10 rad/s^2 is our choice.
"""

from r2s2r.robots.spec import CameraSpec, GripperSpec, JointGroup, RobotSpec

_JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
LEFT_ARM = tuple(f"left_{j}" for j in _JOINTS)
RIGHT_ARM = tuple(f"right_{j}" for j in _JOINTS)
# ALOHA's start pose (the ACT / aloha packages' START_ARM_POSE), both arms.
_START = (0.0, -0.96, 1.16, 0.0, -0.3, 0.0)


def _arm(side: str, joints: tuple[str, ...]) -> JointGroup:
    return JointGroup(
        name=f"{side}_arm",
        joints=joints,
        acceleration_limits=(10.0,) * 6,
        # kp = I w^2 at the start pose, w = 60 rad/s, and 120 for the forearm roll and the wrist: at
        # 60 the arm's heavier joints, moving fast, swing those light links past their setpoint's
        # speed (up to 1.15x measured). kv = 2.2 sqrt(kp I_max) less the joint's damping, I_max the
        # joint's largest inertia (armature included) over 3000 poses within its limits: a damping
        # ratio of at least 1.1 everywhere (the waist's inertia varies 20-fold with the arm's
        # reach), so tracking never overshoots the setpoint's speed. Lag kv / kp: 12-100 ms.
        kp=(265.0, 555.0, 460.0, 84.0, 148.0, 26.0),
        kv=(26.0, 38.0, 17.0, 2.0, 2.7, 0.4),
        damping=(0.1,) * 6,
        armature=(0.02, 0.04, 0.02, 0.004, 0.004, 0.001),
        flange=(f"{side}_ee_arm_link", (0.0, 0.0, 0.0)),
        tcp=(f"{side}_ee_gripper_link", (0.0, 0.0, 0.0)),
    )


def _gripper(side: str) -> GripperSpec:
    # Opening: the gap between the finger bases, 4 mm closed to 74 mm open as the real gripper's
    # software limits measure it (MuJoCo Menagerie's ALOHA notes). Interbotix rates each finger
    # at 5 N; the speed is our choice.
    return GripperSpec(name=f"{side}_gripper", joints=(f"{side}_left_finger", f"{side}_right_finger"),
                       opening_range=(0.004, 0.074), max_speed=0.2, max_force=10.0)


def _wrist_camera(side: str) -> CameraSpec:
    # The D405 above the gripper, pitched 25 deg down onto the fingers (the ALOHA 2 mount).
    return CameraSpec(name=f"cam_{side}_wrist", width=320, height=240, fovy=58.0, pos=(0.0253, 0.0, 0.0825),
                      lookat=(0.2026, 0.0, 0.0), parent=f"{side}_gripper_link")


SPEC = RobotSpec(
    name="aloha",
    description="ALOHA, two ViperX 300 6-DoF followers with grippers, facing across a table",
    urdf="aloha.urdf",
    base_link="aloha_base",
    vendor_packages="interbotix_xsarm_descriptions (aloha_vx300s), aloha",
    groups=(_arm("left", LEFT_ARM), _arm("right", RIGHT_ARM)),
    twin_acceleration_share=0.6,
    home={**dict(zip(LEFT_ARM, _START)), **dict(zip(RIGHT_ARM, _START))},
    grippers=(_gripper("left"), _gripper("right")),
    cameras=(
        # The cell's cameras, on its frame (positions of the ALOHA 2 cell, MuJoCo Menagerie):
        # overhead between the arms looking down at the table, and low in front looking across it.
        CameraSpec(name="cam_high", width=320, height=240, fovy=58.0, pos=(0.0, -0.304, 1.025),
                   lookat=(0.0, 0.17, 0.0), parent="aloha_base"),
        CameraSpec(name="cam_low", width=320, height=240, fovy=58.0, pos=(0.0, -0.377, 0.032),
                   lookat=(0.0, 0.3, 0.096), parent="aloha_base"),
        _wrist_camera("left"),
        _wrist_camera("right"),
    ),
    # ALOHA's policies and teleoperation run at 50 Hz; the followers' joint states come at that rate.
    control_rate_hz=50.0,
    state_rate_hz=50.0,
)
