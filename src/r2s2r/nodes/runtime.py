"""Starting and stopping rclpy nodes the same way everywhere: a multi-threaded executor (a
single-threaded one for a node whose `executor_threads` is 1), and
rclpy's own signal handling, so SIGINT and SIGTERM (what the stack runner sends) both wake the
executor and end the node cleanly."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from r2s2r.processes import dump_stacks_on, exit_with_parent

# MuJoCo's mj_step and rclpy's waits release the GIL; a thread coming back from one waits until
# the thread running Python (an executor rebuilding its wait set for every message) hands it
# over, by default after 5 ms. A driver steps its twin several times per 4 ms state tick, so
# with a busy executor in its process (a policy node's 250 Hz joint_states and /clock) it fell
# to between a half and a tenth of real time. At 0.5 ms it keeps real time.
GIL_SWITCH_INTERVAL_S = 0.0005


def prompt_gil_handover() -> None:
    """Have this process's threads hand the GIL over within GIL_SWITCH_INTERVAL_S."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def spin_in_background(executor) -> threading.Thread:
    """The executor spinning in a daemon thread; end it with stop_spinning."""
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    return thread


def stop_spinning(executor, thread: threading.Thread | None, timeout: float = 2.0) -> None:
    """Shut the executor down and wait for its spin thread before anyone destroys its nodes or
    shuts their context down: rclpy's Executor.shutdown does not wait for a spin_once in
    flight, which would then meet a destroyed node or an invalid context."""
    executor.shutdown(timeout_sec=timeout)
    if thread is not None:
        thread.join(timeout=timeout)


def read_only_parameters(node: Node, live: tuple[str, ...] = ("use_sim_time",)) -> None:
    """Refuse changes at run time to `node`'s parameters other than `live`: the node reads them
    when it starts, so `ros2 param set` gets a refusal that says how to change them instead of a
    success that changes nothing. Call it once every parameter is declared."""
    from rcl_interfaces.msg import SetParametersResult

    def check(parameters) -> SetParametersResult:
        fixed = [p.name for p in parameters if p.name not in live]
        if not fixed:
            return SetParametersResult(successful=True)
        return SetParametersResult(successful=False, reason=(
            f"{', '.join(fixed)}: read when {node.get_name()} starts; set it in the stack file or with "
            f"-p NAME:=VALUE, and restart the node"))
    node.add_on_set_parameters_callback(check)


def check_ranges(node: Node, ranges: dict[str, tuple[float, float, str]], positive: tuple[str, ...] = (),
                 or_zero: tuple[str, ...] = ()) -> None:
    """Each parameter of `ranges` (name: (low, high, what is expected)) a number within [low, high],
    above 0 where it is `positive`, or exactly 0 where it is `or_zero` (a rate's "the default");
    otherwise a ValueError that names the parameter, its value and what was expected, so the node
    does not start."""
    for name, (low, high, meaning) in ranges.items():
        value = node.get_parameter(name).value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"parameter {name!r} is {value!r}; expected {meaning}")
        if not (low <= value <= high or (name in or_zero and value == 0)) or (name in positive and value == 0):
            raise ValueError(f"parameter {name!r} is {value!r}; expected {meaning}")


def hold_stop_signals() -> None:
    """Ignore SIGINT and SIGTERM in this process from now on (it is stopping already)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def run(make_node: Callable[[], Node], args=None) -> int:
    prompt_gil_handover()
    exit_with_parent()
    dump_stacks_on()
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.ALL)
    node = executor = None
    code = 0
    try:
        node = make_node()
        read_only_parameters(node)
        threads = getattr(node, "executor_threads", 2)
        # One thread: rclpy's multi-threaded executor costs several times the single one per message.
        executor = SingleThreadedExecutor() if threads == 1 else MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # a node that cannot start says why, once, and exits non-zero
        if node is not None and not rclpy.ok():
            pass  # a node that ended itself (rclpy.try_shutdown) raced the executor's next wait: done
        else:
            print(f"[fatal] {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            code = 1
    finally:
        # From here on the node is stopping: a second SIGINT (a terminal's Ctrl-C reaches the
        # node, then ros2 launch sends its own) or a SIGTERM must not cut the backend's disconnect
        # short. SIGKILL still ends a stop that hangs.
        hold_stop_signals()
        if executor is not None:  # its worker threads end here, not in the interpreter's exit (which hung
            executor.shutdown(timeout_sec=5.0)  # after a Ctrl-C had interrupted spin())
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return code
