"""Flexiv Rizon 4 with an 85 mm parallel gripper (Robotiq 2F-85 class): the arm as Flexiv builds
it now (`flexiv_rizon4`), and with the wrist of arms built before 2024 (`flexiv_rizon4_pre2024`).

Joint names follow flexiv_ros2 with its default empty prefix (`joint1..7`). Kinematics and
position / velocity / effort limits are in urdf/flexiv_rizon4.urdf; the acceleration limit is
the one flexiv_ros2's hardware interface hands the RDK motion generator (3 rad/s^2). The RDK
streams joint commands and states in real time at 1 kHz.
"""

from dataclasses import replace

from r2s2r.robots.spec import CameraSpec, GripperSpec, JointGroup, RobotSpec

JOINTS = tuple(f"joint{i}" for i in range(1, 8))

SPEC = RobotSpec(
    name="flexiv_rizon4",
    description="Flexiv Rizon 4, 7-DoF, 85 mm parallel gripper",
    urdf="flexiv_rizon4.urdf",
    base_link="base_link",
    vendor_packages="flexiv_ros2 (flexiv_description)",
    groups=(
        JointGroup(
            name="arm",
            joints=JOINTS,
            acceleration_limits=(3.0,) * 7,
            # kv / kp = 0.1 s, as for the other arms: overdamped tracking of the limited setpoints.
            kp=(3000.0, 3000.0, 1500.0, 1500.0, 600.0, 600.0, 400.0),
            kv=(300.0, 300.0, 150.0, 150.0, 60.0, 60.0, 40.0),
            damping=(1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5),
            armature=(0.1, 0.1, 0.05, 0.05, 0.03, 0.03, 0.03),
            flange=("flange", (0.0, 0.0, 0.0)),
            tcp=("gripper_tcp", (0.0, 0.0, 0.0)),
        ),
    ),
    # flexiv_ros2's initial positions (0, -40, 0, 90, 0, 40, 0 deg): the flange points down.
    twin_acceleration_share=0.75,
    home=dict(zip(JOINTS, (0.0, -0.69813, 0.0, 1.570796, 0.0, 0.69813, 0.0))),
    grippers=(
        GripperSpec(name="gripper", joints=("gripper_finger_joint1", "gripper_finger_joint2"),
                    opening_range=(0.0, 0.085), max_speed=0.15, max_force=100.0),
    ),
    cameras=(
        CameraSpec(name="scene", width=320, height=240, fovy=58.0, pos=(1.5, 0.5, 1.0),
                   lookat=(0.4, -0.05, 0.3)),
    ),
    control_rate_hz=1000.0,
    # The RDK reports at 1 kHz; the twin publishes joint_states at 250 Hz to spare the DDS graph
    # (state_rate_hz raises it).
    state_rate_hz=250.0,
)

# The wrist before Flexiv's 2024 redesign (flexiv_description before 2024-03-29): joint 7 40 mm
# further along link 6's x axis and a lighter link 6; the flange is 40 mm from a current arm's.
PRE_2024 = replace(
    SPEC, name="flexiv_rizon4_pre2024", variant_of=SPEC.name,
    description="Flexiv Rizon 4 with the pre-2024 wrist, 7-DoF, 85 mm parallel gripper",
    urdf_changes=(("joint[@name='joint7']/origin", "xyz", "-0.055 0.07 0.11"),
                  ("link[@name='link6']/inertial/mass", "value", "2.1"),
                  ("link[@name='link6']/inertial/origin", "xyz", "-0.01 0.06 0.07")))
