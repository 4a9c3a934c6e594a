"""Where the package's shared files (urdf/, config/, launch/) are.

Looked up in this order: $R2S2R_SHARE; the source checkout this module runs from (a
development or editable install); the ament index (colcon install: share/r2s2r); and
<prefix>/share/r2s2r (pip install). Imports nothing from r2s2r.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path


def _candidates():
    env = os.environ.get("R2S2R_SHARE")
    if env:
        yield Path(env)
    yield Path(__file__).resolve().parents[2]  # <repo>/src/r2s2r/paths.py -> <repo>
    try:
        from ament_index_python.packages import get_package_share_directory
        yield Path(get_package_share_directory("r2s2r"))
    except Exception:  # not installed with colcon, or no ament index: fine
        pass
    yield Path(sys.prefix) / "share" / "r2s2r"


@lru_cache(maxsize=1)
def share_dir() -> Path:
    for candidate in _candidates():
        if (candidate / "urdf").is_dir() and (candidate / "config").is_dir():
            return candidate
    raise FileNotFoundError("r2s2r's share directory (with urdf/ and config/) was not found; "
                            "set R2S2R_SHARE to the repository root or install the package")


def urdf_path(name: str) -> Path:
    return share_dir() / "urdf" / name


DERIVED_URDF_FORMAT = 2  # part of a derived URDF's cache key: raise it when derived_urdf changes what it writes


def derived_urdf(base: str, name: str, changes) -> Path:
    """urdf/`base` with `changes` made, (element path from <robot>, attribute, value) each,
    written once to the user's cache as `name`.urdf (a URDF other tools can read too)."""
    import hashlib
    import xml.etree.ElementTree as ET
    source = urdf_path(base)
    text = source.read_text(encoding="utf-8")
    digest = hashlib.sha1(repr((DERIVED_URDF_FORMAT, name, text, tuple(changes))).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "r2s2r" / "urdf"
    path = cache / f"{name}-{digest}.urdf"
    if path.is_file():
        return path
    root = ET.fromstring(text)
    root.set("name", name)
    for element_path, attribute, value in changes:
        element = root.find(element_path)
        if element is None:
            raise ValueError(f"robot {name}: {source} has no element {element_path!r} to change")
        element.set(attribute, value)
    root.insert(0, ET.Comment(f" {name}: {source.name} with these changes: "
                              + "; ".join(f"{p} {a}={v}" for p, a, v in changes) + " "))
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".tmp{os.getpid()}")
    ET.ElementTree(root).write(partial, encoding="unicode", xml_declaration=True)
    os.replace(partial, path)  # whole or not at all: workers may derive it at once
    return path


def config_path(*parts: str) -> Path:
    return share_dir().joinpath("config", *parts)


def resolve(path: str | os.PathLike) -> Path:
    """A path as given if it exists, else relative to the share directory (config/..., urdf/...)."""
    path = Path(path)
    if path.is_absolute() or path.exists():
        return path
    shared = share_dir() / path
    return shared if shared.exists() else path
