"""Test-session set-up: offscreen GL, and a ROS domain of our own.

Cross-process tests talk over real DDS. Each pytest session (and each of its pytest-xdist
workers) takes its own ROS_DOMAIN_ID and keeps discovery on localhost, so parallel runs on one
machine never hear each other.
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
if "R2S2R_TEST_DOMAIN" not in os.environ:
    # A block of 4 ids per session (1..200: valid domain ids whose ports do not collide on one
    # host); pytest-xdist's workers inherit it and each takes one id of the block.
    os.environ["R2S2R_TEST_DOMAIN"] = str(1 + 4 * (os.getpid() % 50))
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
if _WORKER > 3:
    raise RuntimeError(f"the suite's ROS domains allow 4 pytest-xdist workers, not {_WORKER + 1}: run with -n 4 or fewer")
os.environ["ROS_DOMAIN_ID"] = str(int(os.environ["R2S2R_TEST_DOMAIN"]) + _WORKER)
sys.path.insert(0, str(REPO))  # tests.emulators
# Assertions in shared helpers report their values on failure, as they did in the tests they came from.
pytest.register_assert_rewrite("tests.backend_helpers", "tests.kinematics")

from r2s2r.nodes.runtime import prompt_gil_handover  # noqa: E402
from tests.ros_helpers import StackProcess  # noqa: E402

# In-process backend tests run a control loop, an SDK's threads and a protocol emulator in this one
# process, as a driver node runs its loop and SDK: the GIL is handed over as promptly as there (a
# busy machine once kept an emulated xArm from answering a servo-j within the 100 ms link timeout).
prompt_gil_handover()


# The slowest files, slowest first (durations from a full run beside a busy loop): pytest-xdist
# hands out whole files in collection order, and a long file handed out last runs alone while the
# other worker idles. The rest follow in their usual order.
SLOWEST_FILES = ("test_improve.py", "test_train.py", "test_real2sim_pipeline.py", "test_fidelity.py",
                 "test_sysid_workers.py", "test_skills_refine.py", "test_eval_runner.py", "test_hostile_dds.py",
                 "test_eval_graph.py", "test_stack_endurance.py", "test_variants_pool.py", "test_eval_batch.py",
                 "test_safety.py", "test_collect.py", "test_soak.py", "test_record_episode.py")


@pytest.hookimpl(trylast=True)  # after pytest's own reordering within a file
def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


@pytest.fixture(autouse=True)
def _normal_scheduling(request):
    """Keep the test process SCHED_OTHER. Something in the suite left its main thread SCHED_FIFO
    at priority 99 (running as root, where a native SDK's request for real-time priority
    succeeds); every process a later test started inherited it, and two real-time nodes at the
    kernel's 95 % cap starved the test waiting on them for over half an hour. Reset after each
    test, with a warning that names the test."""
    yield
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # inherited by every process started later
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import warnings
        warnings.warn(f"{request.node.nodeid} left SIGINT ignored in the test process; restored", stacklevel=1)
    if hasattr(os, "sched_getscheduler") and os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        import warnings
        warnings.warn(f"{request.node.nodeid} left the test process with real-time scheduling; reset to "
                      "SCHED_OTHER", stacklevel=1)


@pytest.fixture
def stack_process():
    """Start `r2s2r up STACK` as a subprocess; stopped (and checked to stop) after the test."""
    started = []

    def start(stack, *params, env=None, pythonpath=(), command=("up",)):
        proc = StackProcess(stack, params, env=env, pythonpath=pythonpath, command=command)
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def ros_client():
    """A RobotClient on this session's ROS domain, closed after the test. Each client is a DDS
    participant of its own, so its graph holds only what is announced while it lives: a
    participant the whole session shared kept graph entries of nodes stopped long before (two
    nodes named driver, one without endpoints, for over a minute in a full run)."""
    from r2s2r.nodes.client import RobotClient
    from tests.ros_helpers import own_context
    clients = []

    def make(**kwargs):
        client = RobotClient(name=f"test_client_{len(clients)}", context=own_context(), **kwargs)
        clients.append(client)
        return client
    yield make
    for client in clients:
        client.close()
        client.node.context.shutdown()


@pytest.fixture(scope="module")
def ros_context():
    """An rclpy Context of the test module's own, for nodes built in-process whose callbacks the
    tests call directly (as the executor would)."""
    import rclpy
    from rclpy.context import Context
    context = Context()
    rclpy.init(context=context)
    yield context
    rclpy.shutdown(context=context)
