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

    def rgb(self, camera: str, data: mujoco.MjData | None = None) -> np.ndarray:
        """H x W x 3 uint8, RGB order; of the twin's own state, or of `data` (a copy of it)."""
        renderer = self._renderer(*self.twin.camera_resolution(camera))
        renderer.update_scene(self.twin.data if data is None else data, camera)
        return renderer.render()

    def depth(self, camera: str, data: mujoco.MjData | None = None) -> np.ndarray:
        """H x W float32, metres along the optical axis."""
        renderer = self._renderer(*self.twin.camera_resolution(camera))
        renderer.enable_depth_rendering()
        try:
            renderer.update_scene(self.twin.data if data is None else data, camera)
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


class BackgroundRenderer:
    """Renders a Twin's cameras on a thread of its own, from copies of the physics state, so the
    physics never waits for a frame. MuJoCo releases the GIL while it renders: on a multi-core
    machine the cameras and the physics run side by side.

    `offer(time)` hands over the current state if the last frame set is done (else the frame is
    skipped and counted); `on_frames(time, [(camera, rgb, depth | None)])` runs on the render thread.
    """

    def __init__(self, twin: Twin, cameras, depth_cameras, on_frames, shadows: bool | None = None):
        import threading
        self.twin = twin
        self.cameras = tuple(cameras)
        self.depth_cameras = set(depth_cameras)
        self.on_frames = on_frames
        self.shadows = shadows
        self.skipped = 0
        self.error = ""
        self._state = mujoco.MjData(twin.model)
        self._pending: float | None = None
        self._closed = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="twin-render", daemon=True)
        self._thread.start()

    def offer(self) -> bool:
        with self._wake:
            if self._pending is not None:
                self.skipped += 1
                return False
            src, dst = self.twin.data, self._state
            dst.time = src.time
            dst.qpos[:] = src.qpos
            dst.qvel[:] = src.qvel
            dst.mocap_pos[:] = src.mocap_pos
            dst.mocap_quat[:] = src.mocap_quat
            self._pending = src.time
            self._wake.notify()
            return True

    def _run(self) -> None:
        renderer = TwinRenderer(self.twin, self.shadows)  # the GL context lives on this thread
        try:
            while True:
                with self._wake:
                    self._wake.wait_for(lambda: self._pending is not None or self._closed)
                    if self._closed:
                        return
                    stamp = self._pending
                try:
                    mujoco.mj_forward(self.twin.model, self._state)
                    frames = [(cam, renderer.rgb(cam, self._state),
                               renderer.depth(cam, self._state) if cam in self.depth_cameras else None)
                              for cam in self.cameras]
                    self.on_frames(stamp, frames)
                except Exception as exc:  # keep rendering; the owner reports it
                    self.error = f"{type(exc).__name__}: {exc}"
                with self._wake:
                    self._pending = None
        finally:
            renderer.close()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=2.0)
