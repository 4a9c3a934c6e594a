"""Offscreen RGB and depth rendering of a Twin's cameras (EGL through Mesa on a CPU-only machine)."""

from __future__ import annotations

import mujoco
import numpy as np

from r2s2r.sim.twin import Twin


class TwinRenderer:
    """Renders any camera of a Twin; one MuJoCo renderer per resolution, reused across frames."""

    def __init__(self, twin: Twin, shadows: bool | None = None):
        self.twin = twin
        self.shadows = twin.scene.shadows if shadows is None else shadows
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}

    def _renderer(self, width: int, height: int) -> mujoco.Renderer:
        key = (width, height)
        if key not in self._renderers:
            renderer = mujoco.Renderer(self.twin.model, height=height, width=width)
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
            self._renderers[key] = renderer
        return self._renderers[key]

    def rgb(self, camera: str) -> np.ndarray:
        """H x W x 3 uint8, RGB order."""
        renderer = self._renderer(*self.twin.camera_resolution(camera))
        renderer.update_scene(self.twin.data, camera)
        return renderer.render()

    def depth(self, camera: str) -> np.ndarray:
        """H x W float32, metres along the optical axis."""
        renderer = self._renderer(*self.twin.camera_resolution(camera))
        renderer.enable_depth_rendering()
        try:
            renderer.update_scene(self.twin.data, camera)
            return renderer.render().astype(np.float32)
        finally:
            renderer.disable_depth_rendering()

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
