"""Starting and stopping rclpy nodes the same way everywhere: a multi-threaded executor, and
rclpy's own signal handling, so SIGINT and SIGTERM (what the stack runner sends) both wake the
executor and end the node cleanly."""

from __future__ import annotations

import sys
from typing import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions


def run(make_node: Callable[[], Node], args=None) -> int:
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.ALL)
    node = None
    code = 0
    try:
        node = make_node()
        executor = MultiThreadedExecutor(num_threads=2)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # a node that cannot start says why, once, and exits non-zero
        print(f"[fatal] {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return code
