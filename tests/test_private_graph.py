"""nodes.runtime.PrivateGraph: a tool's own nodes (a trial's, a recording's, a soak's) torn down
in the one safe order however the work ends, with no callback running on a node being destroyed
(rclpy's Executor.shutdown waits for none), and nothing of them left behind."""

import threading
import time

import pytest
from rclpy.node import Node

from r2s2r.nodes.runtime import PrivateGraph


@pytest.mark.parametrize("threads", [1, 2])
def test_an_error_stops_the_spin_then_closes_and_destroys_newest_first_then_ends_the_context(threads):
    events = []
    lock = threading.Lock()

    def log(*event):
        with lock:
            events.append(event)

    class Ticking(Node):
        def __init__(self, name, context):
            super().__init__(name, context=context)
            self.create_timer(0.002, self._tick)

        def _tick(self):  # a slow callback, still running when the work fails
            log("begin", self.get_name())
            time.sleep(0.2)
            log("end", self.get_name())

        def close(self):
            log("close", self.get_name())

        def destroy_node(self):
            log("destroy", self.get_name())
            return super().destroy_node()

    with pytest.raises(RuntimeError, match="the work failed"):
        with PrivateGraph(threads=threads) as graph:
            graph.own(Ticking("first", graph.context))
            plain = graph.own(Node("plain", context=graph.context))  # no close(): destroyed all the same
            graph.own(Ticking("second", graph.context))
            spinner = graph.spin()
            deadline = time.monotonic() + 60.0
            wanted = {("begin", "first"), ("begin", "second")} if threads > 1 else {("end", "first"), ("end", "second")}
            while not wanted <= set(events) and time.monotonic() < deadline:
                time.sleep(0.001)
            assert wanted <= set(events), "the executor never spun"
            raise RuntimeError("the work failed")  # while callbacks sleep (one at a time on one thread)
    assert not spinner.is_alive()
    assert not graph.context.ok()
    with pytest.raises(Exception):  # noqa: B017 - rclpy's InvalidHandle: the node was destroyed
        plain.get_node_names()
    teardown = [e for e in events if e[0] in ("close", "destroy")]
    assert teardown == [("close", "second"), ("destroy", "second"), ("close", "first"), ("destroy", "first")]
    # Every callback begun had ended before the first node closed, and none began after.
    callbacks, closing = events[:events.index(("close", "second"))], events[events.index(("close", "second")):]
    assert [e for e in callbacks if e[0] == "begin"] and not [e for e in closing if e[0] in ("begin", "end")]
    for name in ("first", "second"):
        assert callbacks.count(("begin", name)) == callbacks.count(("end", name)), events


def test_a_single_threaded_graph_for_one_thread():
    from rclpy.executors import SingleThreadedExecutor

    with PrivateGraph(threads=1) as graph:
        assert isinstance(graph.executor, SingleThreadedExecutor)
    assert not graph.context.ok()


@pytest.mark.parametrize("threads", [1, 2])
def test_the_spin_outlives_an_entity_destroyed_while_the_executor_gathers_its_wait_set(threads):
    """rclpy 7 adds a node's waitables to the wait set without holding them: a subscription (whose
    QoS event handlers are waitables) destroyed by another thread meanwhile raised InvalidHandle
    out of the spin, and the spin thread ended (a CI run's test client then heard nothing more).
    The race is emulated here by a waitable whose add_to_wait_set meets its own destruction."""
    from rclpy.exceptions import InvalidHandle
    from rclpy.waitable import NumberOfEntities, Waitable
    from std_msgs.msg import String

    class DestroyedMeanwhile(Waitable):
        def __init__(self, node):
            super().__init__(node.default_callback_group)
            self.node, self.raised = node, threading.Event()

        def get_num_entities(self):
            return NumberOfEntities()

        def is_ready(self, wait_set):
            return False

        def add_to_wait_set(self, wait_set):
            self.node.remove_waitable(self)  # as destroy_subscription takes its handlers off the node
            self.raised.set()
            raise InvalidHandle("cannot use Destroyable because destruction was requested")

    received = []
    with PrivateGraph(threads=threads) as graph:
        node = graph.own(Node("listener", context=graph.context))
        node.create_subscription(String, "race_chatter", received.append, 10)
        publisher = node.create_publisher(String, "race_chatter", 10)
        waitable = DestroyedMeanwhile(node)
        node.add_waitable(waitable)
        spinner = graph.spin()
        assert waitable.raised.wait(60.0), "the executor never built a wait set"
        deadline = time.monotonic() + 60.0
        while len(received) < 5 and time.monotonic() < deadline:
            publisher.publish(String(data="still listening"))
            time.sleep(0.01)
        assert spinner.is_alive() and len(received) >= 5, (spinner.is_alive(), len(received))
