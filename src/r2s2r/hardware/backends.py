"""Backends by name. A backend is one module in this package, named as the `backend`
parameter (`sim`, `franka`, `xarm`, `flexiv`, `rby1`, `aloha`), defining `HARDWARE`, a
Hardware subclass, at its top level. Vendor SDKs are imported inside the backend, when it
connects."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from r2s2r.hardware.base import Hardware, HardwareError

_DEFINES_HARDWARE = re.compile(r"^HARDWARE\s*=", re.MULTILINE)


def backend_names() -> list[str]:
    """The modules of this package that define HARDWARE, found from their source: listing the
    backends imports no vendor SDK and no helper module is taken for one."""
    import r2s2r.hardware as package
    folder = Path(package.__path__[0])
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")
                  and _DEFINES_HARDWARE.search((folder / f"{m.name}.py").read_text(encoding="utf-8")))


def load_backend(name: str) -> type[Hardware]:
    known = backend_names()
    if name not in known:
        raise HardwareError(f"unknown backend {name!r}; expected one of {', '.join(known)}")
    module = importlib.import_module(f"r2s2r.hardware.{name}")
    hardware = getattr(module, "HARDWARE", None)
    if not (isinstance(hardware, type) and issubclass(hardware, Hardware)):
        raise HardwareError(f"backend module r2s2r.hardware.{name} defines no HARDWARE class")
    return hardware
