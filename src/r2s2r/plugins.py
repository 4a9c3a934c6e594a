"""Plug-ins: robots, hardware backends, tasks and scripted policies, registered one way.

Every plug-in is a Python entry point, declared by the package that ships it (r2s2r's own in its
pyproject.toml, a lab's in theirs) and found through the installed packages' metadata, so adding
one never edits r2s2r:

    [project.entry-points."r2s2r.robots"]
    my_arm = "my_lab.robots:MY_ARM"             # a RobotSpec
    [project.entry-points."r2s2r.backends"]
    my_arm = "my_lab.hardware:MyArmHardware"    # a Hardware subclass; the `backend` parameter's value
    [project.entry-points."r2s2r.tasks"]
    my_lab = "my_lab.tasks:TASK_FOLDER"         # a folder of task YAMLs (each file one task)
    [project.entry-points."r2s2r.scripted_policies"]
    wave = "my_lab.policies:make_wave"          # a factory (params, defaults) -> Policy

`r2s2r robots list`, `r2s2r backends list`, `r2s2r tasks list` print what is installed. A plug-in
is imported only when it is used (a backend's module when the driver starts it, and its vendor
SDK only when it connects).
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

GROUPS = {
    "robots": "r2s2r.robots",
    "backends": "r2s2r.backends",
    "tasks": "r2s2r.tasks",
    "scripted_policies": "r2s2r.scripted_policies",
}


SINGULAR = {"robots": "robot", "backends": "backend", "tasks": "task folder",
            "scripted_policies": "scripted policy"}


class PluginError(LookupError):
    """An unknown plug-in, two with one name, or one that fails to load."""

    def __str__(self):
        return self.args[0]


@functools.cache
def entries(kind: str) -> dict[str, EntryPoint]:
    """The installed plug-ins of one kind, by name; two packages declaring one name is an error."""
    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=GROUPS[kind]):
        if entry.name in found and found[entry.name].value != entry.value:
            raise PluginError(f"two {kind} plug-ins are named {entry.name!r}: {found[entry.name].value} and "
                              f"{entry.value}; rename one in its package's entry points")
        found[entry.name] = entry
    return dict(sorted(found.items()))


def names(kind: str) -> list[str]:
    return list(entries(kind))


def load(kind: str, name: str):
    """The object plug-in `name` of `kind` registers; PluginError names the known ones."""
    known = entries(kind)
    if name not in known:
        raise PluginError(f"unknown {SINGULAR[kind]} {name!r}; expected one of "
                          f"{', '.join(known) or 'none: no package registers one (is r2s2r installed? pip install -e .)'}")
    try:
        return known[name].load()
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"{SINGULAR[kind]} {name!r} ({known[name].value}) cannot be loaded: "
                          f"{exc}") from None


def source(kind: str, name: str) -> str:
    """Where plug-in `name` comes from: `module:attribute (distribution)`."""
    entry = entries(kind)[name]
    dist = getattr(entry, "dist", None)
    return f"{entry.value} ({dist.name})" if dist is not None else entry.value
