"""setuptools entry for colcon (ament_python) and pip: metadata lives in pyproject.toml;
this file adds the ROS share/ files (package.xml, the ament index marker, launch/, config/, urdf/,
interfaces/)."""

from pathlib import Path

from setuptools import setup

PACKAGE = "r2s2r"
ROOT = Path(__file__).parent


def share_tree(folder: str):
    """(share/r2s2r/<dir>, [files]) pairs for every directory under `folder`."""
    entries = {}
    for path in sorted((ROOT / folder).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(ROOT)
            entries.setdefault(f"share/{PACKAGE}/{rel.parent.as_posix()}", []).append(rel.as_posix())
    return list(entries.items())


setup(
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *share_tree("launch"),
        *share_tree("config"),
        *share_tree("urdf"),
        *share_tree("interfaces"),  # control_msgs and tf2_msgs definitions: `r2s2r interfaces build`
    ],
)
