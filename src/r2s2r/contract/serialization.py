"""ROS 2 messages to and from their CDR bytes (what a publisher puts on the wire), for bags.

rclpy does the work; it lives here so that layers below the contract (data/, eval/) can write
and read real ROS 2 messages without importing rclpy themselves.
"""

from __future__ import annotations


def to_cdr(message) -> bytes:
    from rclpy.serialization import serialize_message
    return serialize_message(message)


def from_cdr(data: bytes, message_type):
    from rclpy.serialization import deserialize_message
    return deserialize_message(data, message_type)
