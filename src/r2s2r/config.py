"""Reading YAML configuration with errors that name the file, the key and what was expected.

Every layer reads YAML (scenes, stacks, robot configs), so this module sits below them all
and imports nothing from r2s2r.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml


class ConfigError(ValueError):
    """A configuration file or value is wrong; the message says where and what was expected."""

    def __init__(self, source: str | Path | None, key: str, expected: str, got: Any = None):
        self.source = str(source) if source is not None else "<config>"
        self.key = key
        self.expected = expected
        self.got = got
        where = f"{self.source}: {key}" if key else self.source
        detail = f"expected {expected}"
        if got is not None:
            detail += f", got {got!r}"
        super().__init__(_printable(f"{where}: {detail}"))  # one line, whatever a file or key name holds


def _printable(text: str) -> str:
    """`text` with its control characters (a newline in a file or key name) escaped as Python writes them."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def load_yaml(path: str | Path) -> dict:
    """Load a YAML mapping; a missing file, bad syntax or a non-mapping is a ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, "", "an existing YAML file", "file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"byte {exc.start}", "a UTF-8 text file", exc.object[exc.start:exc.start + 4]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "document"
        raise ConfigError(path, where, "valid YAML", str(getattr(exc, "problem", exc))) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, "", "a mapping at the top level", type(data).__name__)
    return data


class Section:
    """A view of one mapping inside a config file that knows its dotted path for errors."""

    def __init__(self, data: Any, source: str | Path | None, path: str = ""):
        if not isinstance(data, dict):
            raise ConfigError(source, path or "<top>", "a mapping", data)
        self.data = data
        self.source = source
        self.path = path

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, expected: str, got: Any = None) -> ConfigError:
        return ConfigError(self.source, self.key(name), expected, got)

    def reject_unknown(self, allowed: Iterable[str]) -> None:
        allowed = set(allowed)
        for name in self.data:
            if name not in allowed:
                raise self.error(str(name), "one of the keys " + ", ".join(sorted(allowed)), "unknown key")

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default: Any = ...) -> Any:
        if name not in self.data:
            if default is ...:
                raise self.error(name, "a value (the key is required)", None)
            return default
        return self.data[name]

    def section(self, name: str, default: Any = ...) -> "Section":
        value = self.raw(name, default)
        return Section({} if value is None else value, self.source, self.key(name))

    def sections(self, name: str) -> list["Section"]:
        value = self.raw(name, [])
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(name, "a list of mappings", value)
        return [Section(item, self.source, f"{self.key(name)}[{i}]") for i, item in enumerate(value)]

    def string(self, name: str, default: Any = ..., choices: Sequence[str] | None = None) -> str:
        value = self.raw(name, default)
        if not isinstance(value, str) or not value:
            raise self.error(name, "a non-empty string", value)
        if choices is not None and value not in choices:
            raise self.error(name, "one of " + ", ".join(choices), value)
        return value

    def number(self, name: str, default: Any = ..., minimum: float | None = None,
               maximum: float | None = None, positive: bool = False) -> float:
        value = self.raw(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(name, "a finite number", value)
        value = float(value)
        if positive and value <= 0:
            raise self.error(name, "a number greater than 0", value)
        if minimum is not None and value < minimum:
            raise self.error(name, f"a number >= {minimum}", value)
        if maximum is not None and value > maximum:
            raise self.error(name, f"a number <= {maximum}", value)
        return value

    def integer(self, name: str, default: Any = ..., minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.raw(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, "an integer", value)
        if minimum is not None and value < minimum:
            raise self.error(name, f"an integer >= {minimum}", value)
        if maximum is not None and value > maximum:
            raise self.error(name, f"an integer <= {maximum}", value)
        return value

    def boolean(self, name: str, default: Any = ...) -> bool:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise self.error(name, "true or false", value)
        return value

    def vector(self, name: str, length: int | Sequence[int], default: Any = ...,
               positive: bool = False) -> tuple[float, ...]:
        value = self.raw(name, default)
        lengths = (length,) if isinstance(length, int) else tuple(length)
        described = " or ".join(str(n) for n in lengths)
        ok = isinstance(value, (list, tuple)) and len(value) in lengths and all(
            not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) for v in value)
        if not ok:
            raise self.error(name, f"a list of {described} finite numbers", value)
        if positive and any(v <= 0 for v in value):
            raise self.error(name, f"a list of {described} numbers greater than 0", value)
        return tuple(float(v) for v in value)
