"""Frame ids (REP-105): the twin's world, each robot's base, camera optical frames."""

from __future__ import annotations

WORLD = "world"


def camera_frame(camera: str) -> str:
    """The camera's body frame (x forward, z up; REP-103)."""
    return f"{camera}_link"


def camera_optical_frame(camera: str) -> str:
    """The frame images and camera_info are stamped in (z forward, x right, y down)."""
    return f"{camera}_optical_frame"
