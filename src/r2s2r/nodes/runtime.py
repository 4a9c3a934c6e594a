"""Starting and stopping rclpy nodes the same way everywhere: a multi-threaded executor (a
single-threaded one for a node whose `executor_threads` is 1), and
rclpy's own signal handling, so SIGINT and SIGTERM (what the stack runner sends) both wake the
executor and end the node cleanly."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Callable

import rclpy
from rclpy.exceptions import InvalidHandle
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


class _Spinner(threading.Thread):
    """executor.spin's loop, with an end of its own: Executor.shutdown (rclpy 7, Jazzy) waits for
    no callback and destroys the executor's guard condition at once, so a callback still running
    on the spin thread raised InvalidHandle on it, and one queued in a MultiThreadedExecutor's
    pool could run on a node already destroyed. This loop ends on an event, after the callback
    under way; stop_spinning then lets the pool drain before it shuts the executor down."""

    def __init__(self, executor):
        super().__init__(daemon=True, name="executor-spin")
        self.executor = executor
        self.stopping = threading.Event()
        self.error: BaseException | None = None  # what ended the spin early, for its owner to report

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self.error = exc
            raise

    def _loop(self) -> None:
        while not self.stopping.is_set() and self.executor.context.ok():
            # spin_once with a wait that also ends when stopping is set (rclpy's private method:
            # spin_until_future_complete would add a callback to its future for every call).
            try:
                self.executor._spin_once_impl(None, self.stopping.is_set)
            except InvalidHandle:
                # rclpy 7 adds a node's waitables (a subscription's QoS event handlers) to its
                # wait set without holding them, so a subscription destroyed meanwhile raised
                # here once and ended the spin: a test's client then heard nothing more. The
                # next wait leaves the destroyed entity out.
                continue


def spin_in_background(executor) -> threading.Thread:
    """The executor spinning in a daemon thread; end it with stop_spinning."""
    thread = _Spinner(executor)
    thread.start()
    return thread


def stop_spinning(executor, thread: threading.Thread | None, timeout: float = 2.0) -> None:
    """End the spin after the callback under way, wait for the callbacks queued in a
    MultiThreadedExecutor's pool, then shut the executor down: its nodes can then be destroyed
    and their context shut down (see _Spinner)."""
    deadline = time.monotonic() + timeout
    if isinstance(thread, _Spinner):
        thread.stopping.set()
        executor.wake()
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    for task in list(getattr(executor, "_futures", ())):  # rclpy's own list of the pool's callbacks
        while not task.done() and time.monotonic() < deadline:
            time.sleep(0.001)
    executor.shutdown(timeout_sec=max(0.0, deadline - time.monotonic()))
    pool = getattr(executor, "_executor", None)
    if pool is not None:
        pool.shutdown(wait=False)  # its idle worker threads end now, not when the executor is collected
    if thread is not None:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


class PrivateGraph:
    """Nodes a tool puts on the graph itself (a trial's driver and policy, a recording's script
    player, a soak's monitor) in an rclpy context and executor of their own, spun in a background
    thread, and torn down in the one safe order however the work ends: the executor stopped and
    its spin joined, each node closed (where it has `close`) and destroyed, newest first, then
    the context shut down.

        with PrivateGraph(threads=3) as graph:
            driver = graph.own(DriverNode(..., context=graph.context))
            graph.spin()

    An owner that outlives one block (a test's listener) calls open() and close() instead.
    """

    def __init__(self, threads: int = 2):
        self.threads = threads
        self.context = self.executor = self.spinner = None
        self.nodes: list[Node] = []

    def __enter__(self) -> PrivateGraph:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> PrivateGraph:
        from rclpy.context import Context
        self.context = Context()
        rclpy.init(context=self.context)
        try:
            self.executor = (SingleThreadedExecutor(context=self.context) if self.threads == 1
                             else MultiThreadedExecutor(num_threads=self.threads, context=self.context))
        except BaseException:
            rclpy.shutdown(context=self.context)
            raise
        return self

    def own(self, node: Node) -> Node:
        """`node` (made in this graph's context), spun by its executor and destroyed with it."""
        self.nodes.append(node)
        self.executor.add_node(node)
        return node

    def spin(self) -> threading.Thread:
        self.spinner = spin_in_background(self.executor)
        return self.spinner

    def close(self) -> None:
        try:
            stop_spinning(self.executor, self.spinner, timeout=5.0)
            for node in reversed(self.nodes):
                close = getattr(node, "close", None)
                if close is not None:
                    close()
                node.destroy_node()
        finally:
            rclpy.shutdown(context=self.context)


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
