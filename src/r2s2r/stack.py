"""Stacks: the nodes of one graph, their parameters and remappings, in one YAML file.

`r2s2r up STACK` starts them as processes (this module); `launch/bringup.launch.py` turns
the same parsed stack into launch_ros Node actions on a full ROS install.

    name: franka_fr3_sim
    nodes:
      - name: twin                   # ROS node name
        executable: driver_node      # an r2s2r node: r2s2r.nodes.<executable>
        namespace: ""                # optional
        parameters:                  # files (ROS params YAML) and inline mappings, in order
          - config/robots/franka_fr3.yaml
          - {backend: sim, scene: config/scenes/franka_table.yaml}
        remappings: {from: to}       # optional
        on_exit: stop                # stop (the whole stack) | restart | ignore
        restart_delay: 1.0
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


from r2s2r import paths
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.processes import dump_stacks_on, signal_group

ON_EXIT = ("stop", "restart", "ignore")
STOP_TIMEOUT_S = 4.0  # SIGTERM, then SIGKILL: everything is down within 5 s


@dataclass(frozen=True)
class NodeSpec:
    name: str
    executable: str
    namespace: str = ""
    parameter_files: tuple[str, ...] = ()
    parameters: dict = field(default_factory=dict)  # inline values, applied after the files
    remappings: tuple[tuple[str, str], ...] = ()
    on_exit: str = "stop"
    restart_delay: float = 1.0
    arguments: tuple[str, ...] = ()

    def ros_arguments(self) -> list[str]:
        args = ["--ros-args", "-r", f"__node:={self.name}"]
        if self.namespace:
            args += ["-r", f"__ns:={self.namespace if self.namespace.startswith('/') else '/' + self.namespace}"]
        for path in self.parameter_files:
            args += ["--params-file", path]
        for key, value in self.parameters.items():
            # JSON is YAML that ROS parses back to the same value, without YAML's "..." ends.
            args += ["-p", f"{key}:={json.dumps(value)}"]
        for src, dst in self.remappings:
            args += ["-r", f"{src}:={dst}"]
        return args


@dataclass(frozen=True)
class StackSpec:
    name: str
    nodes: tuple[NodeSpec, ...]
    source: str


def _known_executables() -> list[str]:
    nodes_dir = Path(__file__).parent / "nodes"
    return sorted(p.stem for p in nodes_dir.glob("*_node.py"))


def parse_stack(data: dict, source: str, overrides: dict | None = None) -> StackSpec:
    """Parse a stack; `overrides` (e.g. from the command line) are added to every node's parameters."""
    top = Section(data, source)
    top.reject_unknown({"name", "nodes", "description"})
    known = _known_executables()
    nodes = []
    for sec in top.sections("nodes"):
        sec.reject_unknown({"name", "executable", "namespace", "parameters", "remappings", "on_exit",
                            "restart_delay", "arguments"})
        executable = sec.string("executable")
        if executable not in known:
            raise sec.error("executable", "one of r2s2r's nodes: " + ", ".join(known), executable)
        files, inline = [], {}
        params = sec.raw("parameters", [])
        if not isinstance(params, list):
            raise sec.error("parameters", "a list of parameter files and mappings", params)
        for i, item in enumerate(params):
            key = f"parameters[{i}]"
            if isinstance(item, str):
                resolved = paths.resolve(item)
                if not resolved.is_file():
                    raise sec.error(key, "an existing ROS parameters YAML file", item)
                load_yaml(resolved)  # fail now, naming the file, rather than in the node
                files.append(str(resolved))
            elif isinstance(item, dict):
                for k, v in item.items():
                    if isinstance(v, str) and k in ("scene",) and v:
                        resolved = paths.resolve(v)
                        if not resolved.is_file():
                            raise sec.error(f"{key}.{k}", "an existing file", v)
                        v = str(resolved)
                    inline[str(k)] = v
            else:
                raise sec.error(key, "a file path or a mapping of parameter names to values", item)
        inline.update(overrides or {})
        remaps = sec.raw("remappings", {}) or {}
        if not isinstance(remaps, dict):
            raise sec.error("remappings", "a mapping of topic names (from: to)", remaps)
        arguments = sec.raw("arguments", []) or []
        if not isinstance(arguments, list):
            raise sec.error("arguments", "a list of strings", arguments)
        nodes.append(NodeSpec(name=sec.string("name"), executable=executable,
                              namespace=sec.string("namespace", "") if sec.raw("namespace", "") else "",
                              parameter_files=tuple(files), parameters=inline,
                              remappings=tuple((str(a), str(b)) for a, b in remaps.items()),
                              on_exit=sec.string("on_exit", "stop", choices=ON_EXIT),
                              restart_delay=sec.number("restart_delay", 1.0, minimum=0.0),
                              arguments=tuple(str(a) for a in arguments)))
    if not nodes:
        raise top.error("nodes", "at least one node")
    names = [(n.namespace, n.name) for n in nodes]
    if len(set(names)) != len(names):
        raise top.error("nodes", "unique node names within a namespace", [n.name for n in nodes])
    return StackSpec(top.string("name", Path(source).stem), tuple(nodes), source)


def load_stack(path: str | os.PathLike, overrides: dict | None = None) -> StackSpec:
    resolved = paths.resolve(path)
    return parse_stack(load_yaml(resolved), str(resolved), overrides)


def find_stack(robot: str, backend: str) -> Path:
    """config/stacks/<robot>_<backend>.yaml, or for a vendor backend <robot>_real.yaml; `robot` is a
    registry name or an alias of one (franka). A missing one lists the stacks there are."""
    from r2s2r.paths import config_path
    from r2s2r.robots import canonical_name
    robot = canonical_name(robot)
    path = config_path("stacks", f"{robot}_{backend}.yaml")
    if not path.is_file() and backend != "sim":
        path = config_path("stacks", f"{robot}_real.yaml")
    if not path.is_file():
        known = sorted(p.stem for p in config_path("stacks").glob("*.yaml"))
        raise ConfigError(path, "", "a stack for robot and backend; available stacks: " + ", ".join(known),
                          f"robot:={robot} backend:={backend}")
    return path


def launch_node_arguments(node: NodeSpec) -> dict:
    """Keyword arguments of a launch_ros Node action equivalent to how `r2s2r up` starts `node`."""
    kwargs = {
        "package": "r2s2r",
        "executable": node.executable,
        "name": node.name,
        "namespace": node.namespace,
        "parameters": [*node.parameter_files, dict(node.parameters)] if node.parameters else list(node.parameter_files),
        "remappings": list(node.remappings),
        "output": "screen",
        "emulate_tty": True,
        "respawn": node.on_exit == "restart",
        "respawn_delay": node.restart_delay,
    }
    if node.arguments:
        kwargs["arguments"] = list(node.arguments)
    return kwargs


def node_command(node: NodeSpec) -> list[str]:
    return [sys.executable, "-u", "-m", f"r2s2r.nodes.{node.executable}", *node.arguments, *node.ros_arguments()]


class _Process:
    def __init__(self, node: NodeSpec, out):
        self.node = node
        self.out = out
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.reader: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(node_command(self.node), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, text=True, bufsize=1)
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        prefix = f"[{self.node.name}] "
        for line in self.proc.stdout:
            self.out.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
            self.out.flush()

    def signal(self, sig) -> None:
        if self.proc is not None and self.proc.poll() is None:
            signal_group(self.proc.pid, sig)


class StackRunner:
    """Runs a stack's nodes as processes; output prefixed `[node]`; stops them all on request."""

    def __init__(self, stack: StackSpec, out=None):
        self.stack = stack
        self.out = out or sys.stdout
        self.processes = [_Process(n, self.out) for n in stack.nodes]
        self._stop = threading.Event()
        self.exit_code = 0

    def log(self, message: str) -> None:
        self.out.write(f"[r2s2r up] {message}\n")
        self.out.flush()

    def start(self) -> None:
        for p in self.processes:
            p.start()
            self.log(f"started {p.node.name} ({p.node.executable}), pid {p.proc.pid}")

    def request_stop(self, *_):
        self._stop.set()

    def supervise(self) -> int:
        """Watch the nodes until a stop is requested or the stack's on_exit policy ends it."""
        while not self._stop.is_set():
            for p in self.processes:
                code = p.proc.poll()
                if code is None:
                    continue
                if p.node.on_exit == "restart":
                    p.restarts += 1
                    self.log(f"node {p.node.name} died (exit code {code}); restart {p.restarts} in "
                             f"{p.node.restart_delay:g} s")
                    if self._stop.wait(p.node.restart_delay):
                        break
                    p.start()
                elif p.node.on_exit == "stop":
                    self.log(f"node {p.node.name} exited (exit code {code}); stopping the stack")
                    self.exit_code = 1 if code else 0
                    self._stop.set()
                    break
                else:
                    self.log(f"node {p.node.name} exited (exit code {code}); left stopped (on_exit: ignore)")
                    self.processes.remove(p)
                    break
            self._stop.wait(0.1)
        return self.exit_code

    def stop(self) -> None:
        running = [p for p in self.processes if p.proc is not None and p.proc.poll() is None]
        for p in running:
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for p in running:
            try:
                p.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log(f"node {p.node.name} did not stop within {STOP_TIMEOUT_S:g} s; killing it")
                p.signal(signal.SIGKILL)
                p.proc.wait()
        for p in self.processes:
            if p.reader is not None:
                p.reader.join(timeout=1.0)
        self.log("stack stopped")

    def run(self) -> int:
        dump_stacks_on()
        previous = {s: signal.signal(s, self.request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            return self.supervise()
        finally:
            self.stop()
            for s, handler in previous.items():
                signal.signal(s, handler)


__all__ = ["NodeSpec", "StackSpec", "StackRunner", "ConfigError", "load_stack", "parse_stack", "node_command",
           "find_stack", "launch_node_arguments"]
