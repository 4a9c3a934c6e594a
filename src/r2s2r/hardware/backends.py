"""Hardware backends by name: the `r2s2r.backends` plug-ins (r2s2r.plugins), each a Hardware
subclass named as the `backend` parameter (`sim`, `franka`, `xarm`, `flexiv`, `rby1`, `aloha`,
or a lab's own). Vendor SDKs are imported inside the backend, when it connects."""

from __future__ import annotations

from r2s2r import plugins
from r2s2r.hardware.base import Hardware, HardwareError


def backend_names() -> list[str]:
    """The installed backends, from the packages' metadata: nothing is imported to list them."""
    return plugins.names("backends")


def load_backend(name: str) -> type[Hardware]:
    try:
        hardware = plugins.load("backends", name)
    except plugins.PluginError as error:
        raise HardwareError(str(error)) from None
    if not (isinstance(hardware, type) and issubclass(hardware, Hardware)):
        raise HardwareError(f"backend {name!r} ({plugins.source('backends', name)}) is not a Hardware subclass")
    return hardware
