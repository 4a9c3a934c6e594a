"""Signatures as comparable facts: [name, has_default(, default)] per parameter, self left out.

Python functions give theirs through inspect; pybind11 functions write theirs at the top of
their docstring (one line per overload); flexivrdk_api.json holds them as recorded from a wheel.
"""

from __future__ import annotations

import ast
import inspect
import re


def parameters(function) -> list[list]:
    """A Python function's parameters; the default is kept where it is a literal."""
    result = []
    for p in inspect.signature(function).parameters.values():
        if p.name == "self":
            continue
        entry = [p.name, p.default is not inspect.Parameter.empty]
        if entry[1]:
            entry.append(p.default)
        result.append(entry)
    return result


def _split_top_level(text: str) -> list[str]:
    parts, depth, quote, current = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current)
    return parts


def pybind_signatures(function, name: str) -> list[list[list]]:
    """The overloads a compiled function documents, or the signature of a Python one."""
    if inspect.isfunction(function):
        return [parameters(function)]
    overloads = []
    for line in (function.__doc__ or "").splitlines():
        match = re.match(rf"^(?:\d+\. )?{re.escape(name)}\((.*)\) -> ", line.strip())
        if not match or match.group(1) == "*args, **kwargs":
            continue
        overload = []
        for part in _split_top_level(match.group(1)):
            declaration, has_default, default = part.partition("=")
            parameter = declaration.split(":")[0].strip()
            if parameter == "self":
                continue
            entry = [parameter, bool(has_default)]
            if has_default:
                try:
                    entry.append(ast.literal_eval(default.strip()))
                except (ValueError, SyntaxError):
                    pass  # a default pybind11 prints as a repr, not a literal: its presence counts
            overload.append(entry)
        overloads.append(overload)
    return overloads


def matches(standin: list[list], real: list[list]) -> bool:
    """Same names in the same order, the same ones optional, equal defaults where the real one is known."""
    if len(standin) != len(real):
        return False
    for ours, theirs in zip(standin, real):
        if ours[:2] != theirs[:2]:
            return False
        if len(theirs) > 2 and ours[2] != theirs[2]:
            return False
    return True


def mismatch(where: str, standin: list[list], overloads: list[list[list]]) -> str | None:
    """None when the stand-in's parameters match one of the real overloads, else what differs."""
    if any(matches(standin, real) for real in overloads):
        return None
    return f"{where}: stand-in parameters {standin}, the SDK's {overloads}"
