"""Record the API facts of a flexivrdk wheel that the stand-in is checked against.

flexivrdk has no wheel for Python 3.11 (ours), so the real module cannot be imported in tests.
Its wheels ship type stubs (flexivrdk/_flexivrdk.pyi, generated from the pybind11 module) from
which this script reads, for the classes the backend uses, each method's parameter names and
which have defaults, each property name and each enum member's value, and writes them to
flexivrdk_api.json. Names and signatures only: no code or doc text is kept.

    pip download --no-deps flexivrdk==1.9.4.1 --python-version 3.12 --only-binary=:all: -d /tmp/w
    python tests/standins/extract_flexivrdk_api.py /tmp/w/flexivrdk-1.9.4.1-*.whl
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

CLASSES = ("Gripper", "GripperParams", "GripperStates", "Mode", "OperationalStatus", "Robot", "RobotEvent",
           "RobotInfo", "RobotStates")
OUT = Path(__file__).with_name("flexivrdk_api.json")
ENUM_VALUE = re.compile(r"<\w+\.(\w+): (-?\d+)>")


def _decorators(node: ast.FunctionDef) -> set[str]:
    names = set()
    for d in node.decorator_list:
        if isinstance(d, ast.Name):
            names.add(d.id)
        elif isinstance(d, ast.Attribute):
            names.add(d.attr if isinstance(d.value, ast.Name) and d.value.id == "typing" else "setter")
    return names


def _parameters(node: ast.FunctionDef, static: bool) -> list[list]:
    """[name, has_default] per parameter, and the default's value where it is a literal."""
    args = node.args.args if static else node.args.args[1:]
    defaults = [None] * (len(args) - len(node.args.defaults)) + list(node.args.defaults)
    parameters = []
    for arg, default in zip(args, defaults):
        entry = [arg.arg, default is not None]
        if default is not None:
            try:
                entry.append(ast.literal_eval(default))
            except ValueError:
                pass  # a default that is no literal (an enum member, `...`): its presence is recorded
        parameters.append(entry)
    return parameters


def _class_facts(node: ast.ClassDef, lines: list[str]) -> dict:
    methods: dict[str, list] = {}
    properties: list[str] = []
    members: dict[str, int] = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            decorators = _decorators(item)
            if "setter" in decorators:
                continue
            if "property" in decorators:
                properties.append(item.name)
                continue
            static = "staticmethod" in decorators
            methods.setdefault(item.name, []).append(
                {"static": static, "parameters": _parameters(item, static)})
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            match = ENUM_VALUE.search(lines[item.lineno - 1])
            if match and match.group(1) == item.target.id:
                members[item.target.id] = int(match.group(2))
    facts = {"methods": methods, "properties": sorted(properties)}
    if members:
        facts["enum_members"] = members
    return facts


def extract(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as archive:
        stub = archive.read("flexivrdk/_flexivrdk.pyi").decode()
        package_stub = archive.read("flexivrdk/__init__.pyi").decode()
    version = re.search(r'__version__: str = "([^"]+)"', package_stub).group(1)
    tree = ast.parse(stub)
    lines = stub.splitlines()
    classes = {node.name: _class_facts(node, lines) for node in tree.body
               if isinstance(node, ast.ClassDef) and node.name in CLASSES}
    missing = sorted(set(CLASSES) - set(classes))
    if missing:
        raise SystemExit(f"{wheel.name}: no classes {missing} in flexivrdk/_flexivrdk.pyi")
    return {
        "package": "flexivrdk",
        "version": version,
        "source": f"{wheel.name}: flexivrdk/_flexivrdk.pyi and flexivrdk/__init__.pyi (the stubs in the wheel)",
        "extracted_with": "tests/standins/extract_flexivrdk_api.py",
        "parameters": "[name, has_default, literal default if any] in call order, self left out",
        "classes": classes,
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    OUT.write_text(json.dumps(extract(Path(sys.argv[1])), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
