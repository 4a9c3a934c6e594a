"""A node stops cleanly whatever signals arrive while it stops: nodes.runtime.run holds SIGINT
and SIGTERM once the node is stopping, so a second signal (a terminal's Ctrl-C reaches the node,
then ros2 launch sends its own) cannot cut the backend's disconnect or destroy_node short."""

import subprocess
import sys
import textwrap

import pytest

from tests.ros_helpers import REPO

NODE = textwrap.dedent("""
    import os, signal, time
    from rclpy.node import Node
    from r2s2r.nodes.runtime import run

    class Stopping(Node):
        def __init__(self):
            super().__init__("stopping")
            # The first signal, as a terminal sends it, once the node spins.
            self.create_timer(0.2, lambda: os.kill(os.getpid(), signal.{first}))

        def close(self):
            os.kill(os.getpid(), signal.{second})  # the second lands inside the backend's disconnect
            time.sleep(0.5)
            print("disconnected", flush=True)

        def destroy_node(self):
            super().destroy_node()
            print("destroyed", flush=True)

    raise SystemExit(run(Stopping, []))
""")


@pytest.mark.parametrize("first, second", [("SIGINT", "SIGINT"), ("SIGINT", "SIGTERM"), ("SIGTERM", "SIGINT")])
def test_a_second_signal_while_stopping_does_not_cut_the_disconnect_short(first, second):
    result = subprocess.run([sys.executable, "-c", NODE.format(first=first, second=second)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["disconnected", "destroyed"], result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
