"""r2s2r: a real-to-sim-to-real engine for robot manipulation on ROS 2 Jazzy."""

import os as _os

# MuJoCo picks its OpenGL backend when it is first imported. Offscreen EGL (Mesa on a
# CPU-only machine) is the default here; set MUJOCO_GL=glfw before importing r2s2r for a
# desktop viewer.
_os.environ.setdefault("MUJOCO_GL", "egl")

__version__ = "0.1.0"
