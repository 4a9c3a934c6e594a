"""Calibration boards: geometry, printable images, detection, and a textured board for the twin.

Board frames follow OpenCV: x along the columns, y along the rows, z into the board (the
camera looks at the printed face from negative z). A chessboard's origin is its first inner
corner; a ChArUco board's origin is its outer top-left corner, as OpenCV's CharucoBoard puts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

KINDS = ("chessboard", "charuco")
# Below this many corners a ChArUco view constrains a pose too weakly to calibrate with.
MIN_CHARUCO_CORNERS = 6
# Edge width (pixels, 10 %..90 % rise) above which a chessboard view is too blurred to trust;
# OpenCV's estimateChessboardSharpness documentation puts a sharp board below about 3 px.
MAX_EDGE_WIDTH_PX = 3.0
_SUBPIX_CRITERIA = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 40, 0.001)


class BoardNotFound(ValueError):
    """An image holds no usable view of the board; the message says why."""


@dataclass(frozen=True)
class BoardDetection:
    image_points: np.ndarray  # N x 2 float32, pixels (pixel centres at integers)
    object_points: np.ndarray  # N x 3 float32, metres in the board frame
    image_size: tuple[int, int]  # width, height
    sharpness: float | None = None  # mean edge width in pixels (chessboards)


@dataclass(frozen=True)
class Board:
    """A planar calibration target.

    chessboard: cols x rows *inner corners*; charuco: cols x rows *squares* with ArUco markers
    of side `marker` (default three quarters of a square) from `dictionary`.
    """

    kind: str
    cols: int
    rows: int
    square: float  # metres
    marker: float | None = None
    dictionary: str = "DICT_4X4_50"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"board kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        least = 2 if self.kind == "chessboard" else 3
        what = "inner corners" if self.kind == "chessboard" else "squares"
        if self.cols < least or self.rows < least:
            raise ValueError(f"{self.kind} of {self.cols} x {self.rows} {what}; expected at least {least} x {least}")
        if not self.square > 0:
            raise ValueError(f"board square size {self.square} m; expected a positive size in metres")
        if self.kind == "charuco":
            marker = self.marker if self.marker is not None else 0.75 * self.square
            if not 0 < marker < self.square:
                raise ValueError(f"ChArUco marker size {marker} m; expected between 0 and the square size "
                                 f"{self.square} m")
            object.__setattr__(self, "marker", marker)
            dictionary = getattr(cv2.aruco, self.dictionary, None)
            if not self.dictionary.startswith("DICT_") or dictionary is None:
                known = ", ".join(n for n in dir(cv2.aruco) if n.startswith("DICT_"))
                raise ValueError(f"ArUco dictionary {self.dictionary!r}; expected one of {known}")
            needed = (self.cols * self.rows) // 2
            available = cv2.aruco.getPredefinedDictionary(dictionary).bytesList.shape[0]
            if available < needed:
                raise ValueError(f"ArUco dictionary {self.dictionary} has {available} markers; a {self.cols} x "
                                 f"{self.rows} ChArUco board needs {needed}")

    # -- geometry -----------------------------------------------------------------------------
    @property
    def squares(self) -> tuple[int, int]:
        return (self.cols + 1, self.rows + 1) if self.kind == "chessboard" else (self.cols, self.rows)

    @property
    def corner_grid(self) -> tuple[int, int]:
        """Inner corners across and down."""
        sx, sy = self.squares
        return sx - 1, sy - 1

    @property
    def oriented(self) -> bool:
        """Whether a view fixes the board's frame: ChArUco always; a chessboard when its square
        counts are one odd and one even (otherwise a half turn maps it onto itself)."""
        return self.kind == "charuco" or sum(self.squares) % 2 == 1

    def object_points(self) -> np.ndarray:
        """Every inner corner in the board frame, row after row (detection order)."""
        nx, ny = self.corner_grid
        xs, ys = np.meshgrid(np.arange(nx), np.arange(ny))
        points = np.stack([xs.ravel(), ys.ravel(), np.zeros(nx * ny)], axis=1) * self.square
        if self.kind == "charuco":
            points[:, :2] += self.square
        return points.astype(np.float32)

    def _charuco(self):
        dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, self.dictionary))
        return cv2.aruco.CharucoBoard((self.cols, self.rows), self.square, self.marker, dictionary)

    def image(self, px_per_square: int = 64, margin_squares: float = 0.5) -> tuple[np.ndarray, tuple[float, float]]:
        """A printable grey image of the board with a white margin, and where the board frame's
        origin is in it (pixel edges: (0, 0) is the image's outer top-left corner)."""
        sx, sy = self.squares
        if self.kind == "chessboard":
            cells = (np.add.outer(np.arange(sy), np.arange(sx)) % 2).astype(np.uint8) * 255  # top-left black
            board = np.kron(cells, np.ones((px_per_square, px_per_square), np.uint8))
            origin = (px_per_square, px_per_square)
        else:
            board = self._charuco().generateImage((sx * px_per_square, sy * px_per_square), marginSize=0,
                                                  borderBits=1)
            origin = (0, 0)
        margin = int(round(margin_squares * px_per_square))
        image = cv2.copyMakeBorder(board, margin, margin, margin, margin, cv2.BORDER_CONSTANT, value=255)
        return image, (origin[0] + margin, origin[1] + margin)

    # -- detection ----------------------------------------------------------------------------
    def detect(self, image: np.ndarray, max_edge_width: float = MAX_EDGE_WIDTH_PX) -> BoardDetection:
        """The board's corners in one image; BoardNotFound says why an image is unusable."""
        gray = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        if gray.dtype != np.uint8:
            raise BoardNotFound(f"image of type {gray.dtype}; expected 8-bit")
        size = (gray.shape[1], gray.shape[0])
        if self.kind == "chessboard":
            return self._detect_chessboard(gray, size, max_edge_width)
        return self._detect_charuco(gray, size)

    def _detect_chessboard(self, gray, size, max_edge_width) -> BoardDetection:
        pattern = self.corner_grid
        # The classic detector with sub-pixel refinement is fast; the sector-based one finds boards
        # it misses (uneven light, strong perspective) at a hundred times the cost.
        found, corners = cv2.findChessboardCorners(
            gray, pattern, flags=cv2.CALIB_CB_ADAPTIVE_THRESH | cv2.CALIB_CB_NORMALIZE_IMAGE)
        if found:
            corners = cv2.cornerSubPix(gray, corners, (5, 5), (-1, -1), _SUBPIX_CRITERIA)
        else:
            found, corners = cv2.findChessboardCornersSB(
                gray, pattern, flags=cv2.CALIB_CB_NORMALIZE_IMAGE | cv2.CALIB_CB_ACCURACY)
        if not found:
            raise BoardNotFound(f"no {pattern[0]} x {pattern[1]} chessboard found")
        corners = _orient_chessboard(gray, corners.reshape(-1, 2), pattern, self.oriented)
        # Edge widths across horizontal and vertical lines: motion blur widens only one of them.
        sharpness = max(float(cv2.estimateChessboardSharpness(gray, pattern, corners.reshape(-1, 1, 2),
                                                              vertical=vertical)[0][0]) for vertical in (False, True))
        if sharpness > max_edge_width:
            raise BoardNotFound(f"blurred: the board's edges are {sharpness:.1f} px wide (at most "
                                f"{max_edge_width:g} px expected)")
        return BoardDetection(corners.astype(np.float32), self.object_points(), size, sharpness)

    def _detect_charuco(self, gray, size) -> BoardDetection:
        board = self._charuco()
        corners, ids, _, marker_ids = cv2.aruco.CharucoDetector(board).detectBoard(gray)
        found = 0 if ids is None else len(ids)
        if found < MIN_CHARUCO_CORNERS:
            markers = 0 if marker_ids is None else len(marker_ids)
            raise BoardNotFound(f"{found} ChArUco corners found ({markers} markers); at least "
                                f"{MIN_CHARUCO_CORNERS} expected")
        if board.checkCharucoCornersCollinear(ids):
            raise BoardNotFound(f"the {found} ChArUco corners found lie on one line")
        ids = ids.reshape(-1)
        # A small window: the markers' edges start a few pixels from each corner and would pull it.
        corners = cv2.cornerSubPix(gray, corners.astype(np.float32), (2, 2), (-1, -1), _SUBPIX_CRITERIA)
        return BoardDetection(corners.reshape(-1, 2), self.object_points()[ids], size)


def _orient_chessboard(gray: np.ndarray, corners: np.ndarray, pattern: tuple[int, int], oriented: bool) -> np.ndarray:
    """Corners ordered so the board frame is the printed one: right-handed as seen from the front
    and, where the colours tell, starting at the black top-left square."""
    nx, ny = pattern
    grid = corners.reshape(ny, nx, 2)
    x_step, y_step = grid[0, 1] - grid[0, 0], grid[1, 0] - grid[0, 0]
    if x_step[0] * y_step[1] - x_step[1] * y_step[0] < 0:  # seen mirrored: rows run the other way
        grid = grid[::-1]
    if oriented:
        # The cell between the first four corners is black on the printed board; the next is white.
        first = grid[:2, :2].reshape(-1, 2).mean(axis=0)
        second = grid[:2, 1:3].reshape(-1, 2).mean(axis=0)
        if _intensity(gray, first) > _intensity(gray, second):
            grid = grid[::-1, ::-1]
    return np.ascontiguousarray(grid.reshape(-1, 2))


def _intensity(gray: np.ndarray, point: np.ndarray) -> float:
    x, y = int(round(point[0])), int(round(point[1]))
    h, w = gray.shape
    patch = gray[max(y - 1, 0):min(y + 2, h), max(x - 1, 0):min(x + 2, w)]
    return float(patch.mean())


def add_board_to_spec(spec, board: Board, name: str = "calibration_board", parent=None, pos=(0.0, 0.0, 0.0),
                      quat=(1.0, 0.0, 0.0, 0.0), px_per_square: int = 64, thickness: float = 0.004):
    """A textured, collision-free board in a MuJoCo MjSpec; the new body's frame is the board frame.

    `parent`: the MjsBody to attach it to (default the world); pos / quat ([w, x, y, z]) place the
    board frame in the parent. The printed face lies in the body's z = 0 plane and faces -z.
    Returns the new MjsBody.
    """
    import mujoco

    # A spec imported from URDF discards visual-only geoms, materials and textures when it compiles;
    # the URDF's own visuals are gone by then, so keeping them here only keeps what is added later.
    spec.compiler.discardvisual = False
    image, origin = board.image(px_per_square)
    height_px, width_px = image.shape
    metres_per_px = board.square / px_per_square
    texture = spec.add_texture(name=f"{name}_texture", type=mujoco.mjtTexture.mjTEXTURE_2D, width=width_px,
                               height=height_px, nchannel=3)
    texture.data = np.repeat(image[:, :, None], 3, axis=2).tobytes()
    material = spec.add_material(name=f"{name}_material", specular=0.0, shininess=0.0, reflectance=0.0,
                                 emission=0.5)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = texture.name
    body = (parent or spec.worldbody).add_body(name=name, pos=list(pos), quat=list(quat))
    half = [width_px * metres_per_px / 2, height_px * metres_per_px / 2, thickness / 2]
    # A box shows a 2-D texture on its +z face with image columns along +x and rows along -y; turned
    # half a turn about x, columns run along the board's x, rows along its y, and the face looks along -z.
    centre = [half[0] - origin[0] * metres_per_px, half[1] - origin[1] * metres_per_px, thickness / 2]
    body.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_BOX, size=half, pos=centre, quat=[0.0, 1.0, 0.0, 0.0],
                  material=material.name, contype=0, conaffinity=0, mass=0.05)
    return body


__all__ = ["Board", "BoardDetection", "BoardNotFound", "KINDS", "add_board_to_spec", "MAX_EDGE_WIDTH_PX",
           "MIN_CHARUCO_CORNERS"]
