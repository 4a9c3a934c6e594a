"""QoS profiles of the interface. ROS side: imported by nodes only."""

from __future__ import annotations

from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)

# joint_states, as joint_state_broadcaster publishes it (system default: reliable, depth 10).
STATE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)

# Controller inputs, as ros2_control's controllers subscribe them.
COMMAND = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)

# Latched: a late subscriber still sees the last estop or the scene's object list.
LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)

DIAGNOSTICS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)

# Images: sensor data (best effort, keep last 5). A slow reader drops frames, never queues them.
SENSOR = qos_profile_sensor_data

# rclcpp's ClockQoS: best effort, keep last 1.
CLOCK = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)

# Privileged twin state: reliable, small queue.
TWIN = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5, reliability=ReliabilityPolicy.RELIABLE)

# tf2's: /tf reliable, keep last 100; /tf_static reliable, transient local, keep last 1 (every
# static transform in one message); robot_description as robot_state_publisher latches it.
TF = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE)
TF_STATIC = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.TRANSIENT_LOCAL)
