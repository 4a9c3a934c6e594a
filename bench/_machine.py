"""The machine line every benchmark prints first, so that each figure is read against the machine and its load."""

import os
import platform


def machine_line() -> str:
    """CPU, cores, Python and the one-minute load average at the start of the measurement."""
    return (f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}")
