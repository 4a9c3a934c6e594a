"""Test support for the camera layer: board views rendered by the MuJoCo twin with known truth,
video files and an MJPEG-over-HTTP server made on the spot."""

from __future__ import annotations

import http.server
import socketserver
import threading
import time

import r2s2r  # noqa: F401  (first: it sets MUJOCO_GL before mujoco is imported)

import cv2
import mujoco
import numpy as np
from r2s2r.camera.board import Board, add_board_to_spec
from r2s2r.camera.geometry import MUJOCO_TO_OPTICAL, invert, matrix_to_quat, transform
from r2s2r.robots import CameraSpec
from r2s2r.robots.model import look_at_quat
from r2s2r.sim.render import TwinRenderer
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin, build_scene_spec

BOARD_CENTRE = np.array([0.0, 1.6, 1.0])


def camera_pose(twin: Twin, camera: str) -> np.ndarray:
    """T_world_optical of a twin camera."""
    cam = twin.model.camera(camera).id
    return transform(twin.data.cam_xmat[cam].reshape(3, 3) @ MUJOCO_TO_OPTICAL, twin.data.cam_xpos[cam])


def body_pose(twin: Twin, body: str) -> np.ndarray:
    b = twin.model.body(body).id
    return transform(twin.data.xmat[b].reshape(3, 3), twin.data.xpos[b])


def board_centre(board: Board) -> np.ndarray:
    """The middle of the board's corners, in the board frame."""
    return board.object_points().mean(axis=0).astype(float)


class BoardRig:
    """A free-floating twin camera `calib` and a board hanging in front of it, far from the robot."""

    def __init__(self, board: Board, width: int = 640, height: int = 480, fovy: float = 50.0):
        self.board = board
        self.scene = Scene(robot="franka_fr3", table=None, robot_cameras=False,
                           cameras=(CameraSpec("calib", width, height, fovy, pos=(0.0, 1.0, 1.0),
                                               lookat=tuple(BOARD_CENTRE)),))
        spec = build_scene_spec(self.scene)
        # Board x along world x, y down, printed face towards the camera (world -y).
        rotation = np.column_stack([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
        add_board_to_spec(spec, board, pos=tuple(BOARD_CENTRE - rotation @ board_centre(board)),
                          quat=tuple(matrix_to_quat(rotation)))
        self.twin = Twin(self.scene, spec=spec)
        self.renderer = TwinRenderer(self.twin)
        self.camera_id = self.twin.model.camera("calib").id

    @property
    def intrinsics(self) -> tuple[float, float, float, float]:
        return self.twin.camera_intrinsics("calib")

    def view(self, eye, target=BOARD_CENTRE, up=(0.0, 0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
        """(BGR image, true T_camera_board) with the camera at `eye` looking at `target`."""
        m, d = self.twin.model, self.twin.data
        m.cam_pos[self.camera_id] = eye
        m.cam_quat[self.camera_id] = look_at_quat(eye, target, up)
        mujoco.mj_forward(m, d)
        rgb = self.renderer.rgb("calib")
        truth = invert(camera_pose(self.twin, "calib")) @ body_pose(self.twin, "calibration_board")
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), truth

    def random_views(self, n: int, seed: int = 0):
        """n views from varied distances, angles and rolls."""
        rng = np.random.default_rng(seed)
        views = []
        for _ in range(n):
            distance = rng.uniform(0.35, 0.6)
            yaw, pitch = rng.uniform(-0.8, 0.8), rng.uniform(-0.6, 0.6)
            direction = np.array([np.sin(yaw) * np.cos(pitch), -np.cos(yaw) * np.cos(pitch), np.sin(pitch)])
            eye = BOARD_CENTRE + distance * direction
            target = BOARD_CENTRE + rng.uniform(-0.04, 0.04, 3)
            roll = rng.uniform(-0.5, 0.5)
            views.append(self.view(eye, target, up=(np.sin(roll), 0.0, np.cos(roll))))
        return views

    def close(self):
        self.renderer.close()


class ArmRig:
    """The FR3 twin with a calibration board, for hand-eye calibration.

    eye_in_hand: the wrist camera (at 640 x 480) looks down at a board lying on the table.
    eye_to_hand: a fixed camera looks at a board carried on the hand.
    Poses are those of `fr3_link8` (the flange) in the base `fr3_link0`.
    """

    LINK, BASE = "fr3_link8", "fr3_link0"

    def __init__(self, board: Board, setup: str):
        from r2s2r.robots import get_robot
        self.board, self.setup = board, setup
        robot = get_robot("franka_fr3")
        if setup == "eye_in_hand":
            wrist = next(c for c in robot.cameras if c.name == "wrist")
            self.camera = "wrist"
            cameras = (CameraSpec("wrist", 640, 480, wrist.fovy, wrist.pos, quat=wrist.quat, parent=wrist.parent),)
        else:
            self.camera = "fixed"
            cameras = (CameraSpec("fixed", 640, 480, 50.0, pos=(0.95, 0.25, 0.55), lookat=(0.45, 0.0, 0.45)),)
        self.scene = Scene(robot="franka_fr3", cameras=cameras, robot_cameras=False)
        spec = build_scene_spec(self.scene)
        half = board_centre(board)
        if setup == "eye_in_hand":
            # Face up on the table: board x along world x, y along -y, z down.
            rotation = np.column_stack([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])
            pos = np.array([0.40, 0.0, 0.002]) - rotation @ half
            add_board_to_spec(spec, board, pos=tuple(pos), quat=tuple(matrix_to_quat(rotation)))
        else:
            # On the hand, beside the fingers, its face looking along the hand's +x, its rows along the fingers.
            rotation = np.column_stack([[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])
            pos = np.array([0.06, 0.0, 0.06]) - rotation @ half
            add_board_to_spec(spec, board, parent=spec.body("fr3_hand"), pos=tuple(pos),
                              quat=tuple(matrix_to_quat(rotation)))
        self.twin = Twin(self.scene, spec=spec)
        self.renderer = TwinRenderer(self.twin)
        self.home = self.twin.robot.home_positions
        self._qpos = [self.twin.model.joint(j).qposadr[0] for j in self.twin.joint_names]

    def set_arm(self, q) -> None:
        self.twin.data.qpos[self._qpos] = q
        mujoco.mj_forward(self.twin.model, self.twin.data)

    def link_in_base(self) -> np.ndarray:
        return invert(body_pose(self.twin, self.BASE)) @ body_pose(self.twin, self.LINK)

    def truth(self) -> np.ndarray:
        """The camera's optical frame in the link (eye_in_hand) or the base (eye_to_hand)."""
        parent = self.LINK if self.setup == "eye_in_hand" else self.BASE
        return invert(body_pose(self.twin, parent)) @ camera_pose(self.twin, self.camera)

    def image(self) -> np.ndarray:
        return cv2.cvtColor(self.renderer.rgb(self.camera), cv2.COLOR_RGB2BGR)

    def close(self):
        self.renderer.close()


def make_video(path, frames: int, size=(64, 48), fps: float = 30.0):
    """An MJPEG AVI whose frame i is a flat grey of 8 * i (frame_index reads it back)."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, size)
    for i in range(frames):
        writer.write(np.full((size[1], size[0], 3), 8 * i, np.uint8))
    writer.release()
    return path


def frame_index(image: np.ndarray) -> int:
    return int(round(float(image.mean()) / 8))


class MjpegServer:
    """An MJPEG-over-HTTP camera (multipart/x-mixed-replace, as IP cameras serve it) on a local
    port; stop() drops every connection and refuses new ones until start() again."""

    def __init__(self, size=(64, 48), fps: float = 30.0):
        self.size, self.period = size, 1.0 / fps
        self.port = None
        self.frames_sent = 0
        self._server = None
        self._live = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/stream.mjpg"

    def start(self) -> "MjpegServer":
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                try:
                    while owner._live.is_set():
                        image = np.full((owner.size[1], owner.size[0], 3), owner.frames_sent % 256, np.uint8)
                        jpeg = cv2.imencode(".jpg", image)[1].tobytes()
                        self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n%s\r\n"
                                         % (len(jpeg), jpeg))
                        owner.frames_sent += 1
                        time.sleep(owner.period)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server(("127.0.0.1", self.port or 0), Handler)
        self.port = self._server.server_address[1]
        self._live.set()
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._live.clear()  # streaming handlers return, closing their connections
        self._server.shutdown()
        self._server.server_close()


class CameraListener:
    """Subscribes to cameras' image_raw, camera_info, depth and to diagnostics, keeping every
    message with its arrival time; `delay` makes it a slow subscriber."""

    def __init__(self, cameras, delay: float = 0.0, name: str = "camera_listener"):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.node import Node
        from sensor_msgs.msg import CameraInfo, Image

        from r2s2r.contract import Topics, qos
        from r2s2r.nodes.runtime import PrivateGraph
        # A DDS participant of its own, as each test client has (conftest.ros_client).
        self.graph = PrivateGraph(threads=1).open()
        self.node = self.graph.own(Node(name, context=self.graph.context))
        self.delay = delay
        self.lock = threading.Lock()
        self.images = {c: [] for c in cameras}  # (arrival time, msg)
        self.infos = {c: [] for c in cameras}
        self.depths = {c: [] for c in cameras}
        self.statuses = []  # (arrival time, DiagnosticStatus)
        for camera in cameras:
            self.node.create_subscription(Image, Topics.camera_image(camera),
                                          lambda m, c=camera: self._keep(self.images[c], m, slow=True), qos.SENSOR)
            self.node.create_subscription(CameraInfo, Topics.camera_info(camera),
                                          lambda m, c=camera: self._keep(self.infos[c], m), qos.SENSOR)
            self.node.create_subscription(Image, Topics.camera_depth(camera),
                                          lambda m, c=camera: self._keep(self.depths[c], m), qos.SENSOR)
        self.node.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, self._on_diagnostics, qos.DIAGNOSTICS)
        self.graph.spin()

    def _keep(self, store, msg, slow=False):
        with self.lock:
            store.append((time.time(), msg))
        if slow and self.delay:
            time.sleep(self.delay)

    def _on_diagnostics(self, msg):
        with self.lock:
            self.statuses.extend((time.time(), s) for s in msg.status)

    def status(self, camera: str):
        """(level, message, values) of the newest diagnostics status of a camera, or None."""
        with self.lock:
            for _, status in reversed(self.statuses):
                if status.name == f"r2s2r/camera/{camera}":
                    return status.level[0], status.message, {kv.key: kv.value for kv in status.values}
        return None

    def count(self, camera: str) -> int:
        with self.lock:
            return len(self.images[camera])

    def close(self):
        self.graph.close()
