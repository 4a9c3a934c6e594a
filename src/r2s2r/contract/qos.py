"""QoS profiles of the interface. ROS side: imported by nodes only."""

from __future__ import annotations

from typing import Iterable

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


def for_recording(profile: QoSProfile, depth: int) -> QoSProfile:
    """`profile`'s reliability and durability with a reader queue `depth` deep: a recorder whose
    executor falls behind for a moment (a loaded machine) takes the backlog afterwards instead
    of losing it, as a 10-deep queue does at 250 Hz within 40 ms."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=profile.reliability,
                      durability=profile.durability)


def offered_qos_profiles(profiles: Iterable[QoSProfile]) -> str:
    """The publishers' QoS `profiles` (as the graph reports them) in the YAML rosbag2 (Jazzy)
    writes into an MCAP channel's `offered_qos_profiles`: a list of maps, policies by their
    names, durations as sec and nsec."""
    import yaml

    def duration(value) -> dict[str, int]:
        sec, nsec = divmod(int(value.nanoseconds), 1_000_000_000)
        return {"sec": sec, "nsec": nsec}

    return yaml.safe_dump([{
        "history": p.history.short_key,
        "depth": int(p.depth),
        "reliability": p.reliability.short_key,
        "durability": p.durability.short_key,
        "deadline": duration(p.deadline),
        "lifespan": duration(p.lifespan),
        "liveliness": p.liveliness.short_key,
        "liveliness_lease_duration": duration(p.liveliness_lease_duration),
        "avoid_ros_namespace_conventions": bool(p.avoid_ros_namespace_conventions),
    } for p in profiles], sort_keys=False, default_flow_style=False)
