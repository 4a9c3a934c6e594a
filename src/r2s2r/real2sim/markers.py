"""Fiducial markers on objects: the known-objects file, marker textures for the twin, detection.

A known-objects file tells reconstruction what it cannot see for itself:

    objects:
      - name: block
        marker: {id: 0, size: 0.03, dictionary: DICT_4X4_50, pos: [0, 0, 0.025], quat: [1, 0, 0, 0]}
        shape: box                  # optional: fitted to the depth points when absent
        size: [0.05, 0.04, 0.05]    # optional: measured when absent
        mass: 0.15                  # optional prior for the fit (default: its volume at 600 kg/m^3)
        mesh: meshes/block.obj      # optional: the object's mesh; its bounding shape is used

The marker's pose is its frame in the object's frame (metres, [w, x, y, z]). A marker frame is
OpenCV's: origin at the marker's centre, x to the right of the printed image, y up, z out of
the printed face toward whoever reads it. AprilTag families are dictionaries too
(DICT_APRILTAG_36h11, ...).

The twin shows markers as thin visual-only boxes on the object (`add_markers`), textured with
the marker image (MuJoCo maps a 2-D texture on a box's +z face with image columns along +x and
rows along -y, which is the marker frame's layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from r2s2r.camera.geometry import matrix_to_quat, pose_matrix
from r2s2r.camera.info import CameraCalibration
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.sim.scene import SHAPES

_SIZE_LENGTHS = {"box": 3, "cylinder": 2, "sphere": 1, "capsule": 2}
MARKER_THICKNESS = 0.0005


@dataclass(frozen=True)
class Marker:
    id: int
    size: float  # side of the black square, metres
    dictionary: str = "DICT_4X4_50"
    pos: tuple[float, float, float] = (0.0, 0.0, 0.0)  # marker frame in the object frame
    quat: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0)

    @property
    def T_object_marker(self) -> np.ndarray:
        return pose_matrix(self.pos, self.quat)

    def aruco_dictionary(self):
        value = getattr(cv2.aruco, self.dictionary, None)
        if value is None or not self.dictionary.startswith("DICT_"):
            known = ", ".join(n for n in dir(cv2.aruco) if n.startswith("DICT_"))
            raise ValueError(f"marker dictionary {self.dictionary!r}; expected one of {known}")
        return cv2.aruco.getPredefinedDictionary(value)

    def image(self, px_per_cell: int = 16, margin_cells: int = 1) -> np.ndarray:
        """The printed marker (grey), with a white quiet zone of `margin_cells` cells around it."""
        dictionary = self.aruco_dictionary()
        cells = dictionary.markerSize + 2
        side = cells * px_per_cell
        marker = cv2.aruco.generateImageMarker(dictionary, self.id, side, borderBits=1)
        margin = margin_cells * px_per_cell
        return cv2.copyMakeBorder(marker, margin, margin, margin, margin, cv2.BORDER_CONSTANT, value=255)

    def printed_size(self, margin_cells: int = 1) -> float:
        cells = self.aruco_dictionary().markerSize + 2
        return self.size * (cells + 2 * margin_cells) / cells


@dataclass(frozen=True)
class KnownObject:
    name: str
    marker: Marker | None = None
    shape: str | None = None
    size: tuple[float, ...] | None = None
    mass: float | None = None
    mesh: str | None = None
    rgba: tuple[float, float, float, float] | None = None


def parse_marker(sec: Section) -> Marker:
    sec.reject_unknown({"id", "size", "dictionary", "pos", "quat"})
    marker = Marker(id=sec.integer("id", minimum=0), size=sec.number("size", positive=True),
                    dictionary=sec.string("dictionary", "DICT_4X4_50"), pos=sec.vector("pos", 3, (0.0, 0.0, 0.0)),
                    quat=sec.vector("quat", 4, (1.0, 0.0, 0.0, 0.0)))
    try:
        dictionary = marker.aruco_dictionary()
    except ValueError as exc:
        raise sec.error("dictionary", str(exc).split("expected ", 1)[-1], marker.dictionary) from None
    if marker.id >= dictionary.bytesList.shape[0]:
        raise sec.error("id", f"an id below {dictionary.bytesList.shape[0]} (the size of {marker.dictionary})",
                        marker.id)
    return marker


def _mesh_bounds(path: Path, source) -> tuple[float, float, float]:
    """Extents of a mesh's vertices (OBJ or STL through MuJoCo's own mesh loader)."""
    import mujoco
    if not path.is_file():
        raise ConfigError(source, "mesh", "an existing OBJ or STL file", str(path))
    spec = mujoco.MjSpec()
    spec.add_mesh(name="m", file=str(path.resolve()))
    body = spec.worldbody.add_body(name="b")
    body.add_geom(type=mujoco.mjtGeom.mjGEOM_MESH, meshname="m")
    model = spec.compile()
    vert = model.mesh_vert[model.mesh_vertadr[0]: model.mesh_vertadr[0] + model.mesh_vertnum[0]]
    return tuple(float(v) for v in vert.max(axis=0) - vert.min(axis=0))


def load_known_objects(path: str | Path) -> dict[str, KnownObject]:
    """A known-objects file; errors name the file, the key and what was expected."""
    path = Path(path)
    top = Section(load_yaml(path), str(path))
    top.reject_unknown({"objects"})
    out: dict[str, KnownObject] = {}
    ids: dict[tuple[str, int], str] = {}
    for sec in top.sections("objects"):
        sec.reject_unknown({"name", "marker", "shape", "size", "mass", "mesh", "rgba"})
        name = sec.string("name")
        marker = parse_marker(sec.section("marker")) if sec.has("marker") else None
        if marker is not None:
            key = (marker.dictionary, marker.id)
            if key in ids:
                raise sec.error("marker.id", f"a marker not already on {ids[key]}", marker.id)
            ids[key] = name
        shape = sec.string("shape", choices=SHAPES) if sec.has("shape") else None
        size = None
        mesh = sec.string("mesh") if sec.has("mesh") else None
        if sec.has("size"):
            if shape is None:
                raise sec.error("size", "a shape to go with it (box, cylinder, sphere)")
            size = sec.vector("size", _SIZE_LENGTHS[shape], positive=True)
        elif mesh is not None:
            # A mesh stands in the scene as its bounding box (the twin's objects are primitives).
            shape, size = "box", _mesh_bounds(path.parent / mesh, path)
        if name in out:
            raise sec.error("name", "a name not already listed", name)
        out[name] = KnownObject(name, marker, shape, size, sec.number("mass", positive=True) if sec.has("mass") else None,
                                mesh, sec.vector("rgba", 4) if sec.has("rgba") else None)
    return out


# -- the twin ------------------------------------------------------------------------------------------
def add_markers(spec, markers: dict[str, Marker]) -> None:
    """Textured, collision-free, massless marker plates on the named objects' bodies of `spec`."""
    import mujoco
    spec.compiler.discardvisual = False  # the plates are visual-only geoms
    for name, marker in markers.items():
        body = spec.body(name)
        if body is None:
            raise ValueError(f"marker {marker.id}: no object {name!r} in the scene")
        image = marker.image()
        h, w = image.shape
        texture = spec.add_texture(name=f"{name}_marker_texture", type=mujoco.mjtTexture.mjTEXTURE_2D, width=w,
                                   height=h, nchannel=3)
        texture.data = np.repeat(image[:, :, None], 3, axis=2).tobytes()
        material = spec.add_material(name=f"{name}_marker_material", specular=0.0, shininess=0.0, reflectance=0.0,
                                     emission=0.3)
        material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = texture.name
        half = marker.printed_size() / 2
        # The plate's top face is the marker plane: its centre half a thickness below the marker frame.
        T = marker.T_object_marker @ pose_matrix((0.0, 0.0, -MARKER_THICKNESS / 2 + 0.0002), (1.0, 0.0, 0.0, 0.0))
        body.add_geom(name=f"{name}_marker", type=mujoco.mjtGeom.mjGEOM_BOX,
                      size=[half, half, MARKER_THICKNESS / 2], pos=T[:3, 3].tolist(),
                      quat=matrix_to_quat(T[:3, :3]).tolist(), material=material.name, contype=0, conaffinity=0,
                      density=0.0, group=2)


# -- detection -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MarkerSighting:
    dictionary: str
    id: int
    corners: np.ndarray  # 4 x 2 pixels, OpenCV's order (top-left, top-right, bottom-right, bottom-left)
    T_camera_marker: np.ndarray  # 4 x 4, optical frame
    reprojection_px: float


def detect_markers(rgb: np.ndarray, calibration: CameraCalibration, markers: list[Marker]) -> list[MarkerSighting]:
    """Markers of `markers` seen in one image, each with its pose in the camera's optical frame
    (IPPE for squares; of its two solutions the one that reprojects better)."""
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    out = []
    by_dictionary: dict[str, list[Marker]] = {}
    for m in markers:
        by_dictionary.setdefault(m.dictionary, []).append(m)
    K, D = calibration.K, calibration.D
    for name, wanted in by_dictionary.items():
        params = cv2.aruco.DetectorParameters()
        params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
        detector = cv2.aruco.ArucoDetector(wanted[0].aruco_dictionary(), params)
        corners, ids, _ = detector.detectMarkers(gray)
        if ids is None:
            continue
        sizes = {m.id: m.size for m in wanted}
        for c, i in zip(corners, ids.reshape(-1)):
            if int(i) not in sizes:
                continue
            s = sizes[int(i)] / 2
            object_points = np.array([[-s, s, 0], [s, s, 0], [s, -s, 0], [-s, -s, 0]], dtype=np.float64)
            image_points = c.reshape(4, 2).astype(np.float64)
            n, rvecs, tvecs, errors = cv2.solvePnPGeneric(object_points, image_points, K, D,
                                                          flags=cv2.SOLVEPNP_IPPE_SQUARE)
            if n == 0:
                continue
            best = int(np.argmin(np.asarray(errors).reshape(-1)))
            R, _ = cv2.Rodrigues(rvecs[best])
            T = np.eye(4)
            T[:3, :3], T[:3, 3] = R, np.asarray(tvecs[best]).reshape(3)
            out.append(MarkerSighting(name, int(i), image_points, T, float(np.asarray(errors).reshape(-1)[best])))
    return out


__all__ = ["Marker", "KnownObject", "MarkerSighting", "load_known_objects", "parse_marker", "add_markers",
           "detect_markers"]
