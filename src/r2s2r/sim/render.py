"""Offscreen RGB and depth rendering of a Twin's cameras (EGL through Mesa on a CPU-only machine)."""

from __future__ import annotations

import functools
import hashlib
import weakref

import mujoco
import numpy as np

from r2s2r.sim.twin import Twin

# What mjr_makeContext uploads or reads from a model: twins whose models agree on all of it can
# render through one context (SharedContexts).
_ASSET_FIELDS = ("mesh_vert", "mesh_normal", "mesh_texcoord", "mesh_face", "mesh_facenormal",
                 "mesh_facetexcoord", "mesh_vertadr", "mesh_vertnum", "mesh_faceadr", "mesh_facenum",
                 "tex_data", "tex_adr", "tex_height", "tex_width", "tex_nchannel", "tex_type",
                 "hfield_data", "hfield_size", "hfield_nrow", "hfield_ncol", "skin_vert", "flex_vert")


_DEFAULT_OPTION = mujoco.MjvOption()  # what mujoco.Renderer draws with; read, never changed


def _assets_key(model: mujoco.MjModel) -> str:
    digest = hashlib.sha1()
    for name in _ASSET_FIELDS:
        array = getattr(model, name, None)
        if array is not None:
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    vis = model.vis
    digest.update(np.array([vis.global_.offwidth, vis.global_.offheight, vis.quality.offsamples,
                            vis.quality.shadowsize, vis.quality.numslices, vis.quality.numstacks,
                            vis.quality.numquads, model.stat.extent, vis.map.shadowclip, vis.map.shadowscale,
                            vis.map.fogstart, vis.map.fogend, vis.map.haze], float).tobytes())
    return digest.hexdigest()


@functools.cache
def _owned_gl_context() -> type:
    """mujoco.GLContext without a __del__ of its own: garbage collection may not free it before
    the MjrContext in it (the owner frees both, in order)."""
    return type("_OwnedGLContext", (mujoco.GLContext,), {"__del__": lambda self: None})


class _SharedContext:
    """A GL context and the MjrContext in it. Freed in that order, with the GL context current:
    an MjrContext freed while another context is current deletes that context's textures and
    buffers (mujoco.Renderer's close does the same)."""

    def __init__(self, model: mujoco.MjModel):
        self.gl = _owned_gl_context()(model.vis.global_.offwidth, model.vis.global_.offheight)
        self.gl.make_current()
        self.mjr = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self.mjr)

    def close(self) -> None:
        if self.mjr is not None:
            with self.gl.as_current():
                self.mjr.free()
            self.mjr = None
            self.gl.free()

    def __del__(self) -> None:
        self.close()


class SharedContexts:
    """GL contexts with a model's render assets uploaded (meshes, textures, height fields), each
    shared by the TwinRenderers of every twin whose model carries the same assets: the twins of
    perturbed scenes that move, resize or recolour objects, or move a camera or a light, render
    through one context instead of each setting up its own (about 0.17 s a twin on Mesa, and a
    context switch at every frame). The frames are those of a renderer of their own, pixel for
    pixel. For one thread (the in-process evaluation engine's worker)."""

    def __init__(self):
        self._contexts: dict[str, _SharedContext] = {}
        self._keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # twin -> its assets' key

    def context(self, twin: Twin) -> _SharedContext:
        key = self._keys.get(twin)
        if key is None:
            key = self._keys[twin] = _assets_key(twin.model)
        if key not in self._contexts:
            self._contexts[key] = _SharedContext(twin.model)
        return self._contexts[key]

    def close(self) -> None:
        for context in self._contexts.values():
            context.close()
        self._contexts.clear()


class TwinRenderer:
    """Renders any camera of a Twin; one MuJoCo renderer per resolution, reused across frames, or,
    with `shared`, RGB frames through the shared context of the twin's render assets."""

    def __init__(self, twin: Twin, shadows: bool | None = None, shared: SharedContexts | None = None):
        self.twin = twin
        self.shadows = twin.scene.shadows if shadows is None else shadows
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._shared = shared
        self._scene: mujoco.MjvScene | None = None  # this twin's, drawn through the shared context

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
        if self._shared is not None:
            return self._shared_rgb(camera, self.twin.data if data is None else data)
        renderer = self._renderer(*self.twin.camera_resolution(camera))
        renderer.update_scene(self.twin.data if data is None else data, camera)
        return renderer.render()

    def _shared_rgb(self, camera: str, data: mujoco.MjData) -> np.ndarray:
        """What mujoco.Renderer does for an RGB frame, through the shared context."""
        model = self.twin.model
        context = self._shared.context(self.twin)
        if self._scene is None:
            self._scene = mujoco.MjvScene(model, maxgeom=10000)
            self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
            self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        view = mujoco.MjvCamera()
        view.type = mujoco.mjtCamera.mjCAMERA_FIXED
        view.fixedcamid = model.camera(camera).id
        mujoco.mjv_updateScene(model, data, _DEFAULT_OPTION, None, view, mujoco.mjtCatBit.mjCAT_ALL.value,
                               self._scene)
        width, height = self.twin.camera_resolution(camera)
        rect = mujoco.MjrRect(0, 0, width, height)
        context.gl.make_current()
        mujoco.mjr_render(rect, self._scene, context.mjr)
        image = np.empty((height, width, 3), np.uint8)
        mujoco.mjr_readPixels(image, None, rect, context.mjr)
        return np.flipud(image)

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
        self._scene = None

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
