"""Thin rclpy nodes: each wraps one core object and owns no logic of its own."""
