"""Backends by name. A backend is one module in this package, named as the `backend`
parameter (`sim`, `franka`, `xarm`, `flexiv`, `rby1`, `aloha`), defining `HARDWARE`, a
Hardware subclass. Vendor SDKs are imported inside the backend, when it connects."""

from __future__ import annotations

import importlib
import pkgutil

from r2s2r.hardware.base import Hardware, HardwareError

_NOT_BACKENDS = {"base", "backends", "controller", "loop", "motion", "safety", "trajectory", "validation"}


def backend_names() -> list[str]:
    import r2s2r.hardware as package
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                  if m.name not in _NOT_BACKENDS and not m.name.startswith("_"))


def load_backend(name: str) -> type[Hardware]:
    known = backend_names()
    if name not in known:
        raise HardwareError(f"unknown backend {name!r}; expected one of {', '.join(known)}")
    module = importlib.import_module(f"r2s2r.hardware.{name}")
    hardware = getattr(module, "HARDWARE", None)
    if not (isinstance(hardware, type) and issubclass(hardware, Hardware)):
        raise HardwareError(f"backend module r2s2r.hardware.{name} defines no HARDWARE class")
    return hardware
