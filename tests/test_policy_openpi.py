"""openpi's websocket protocol against a server written with openpi-client's own msgpack_numpy:
the remote loader acts exactly as the local model, and a server that dies, hangs or answers
garbage gives a clear error while the runtime, and policy_node over ROS, hold."""

import socket
import threading
import time

import numpy as np
import pytest
import torch
from openpi_client import msgpack_numpy as reference
from websockets.sync.server import serve

from r2s2r.policy import (ActionSpace, Normalizer, Observation, ObservationSpace, PolicyError, PolicyMetadata,
                          PolicyRuntime, RuntimeConfig, load_policy)
from r2s2r.policy import remote
from r2s2r.policy.models import ConvPolicy
from r2s2r.policy.tensor import TensorPolicy
from r2s2r.robots import get_robot

META = PolicyMetadata(ObservationSpace({"arm": 7}, ("gripper",), {"wrist": (24, 32)}),
                      ActionSpace({"arm": 7}, ("gripper",)), 10.0, 5, "tiny")
STATS = {"state": {"mode": "mean_std", "mean": [0.1] * 8, "std": [0.7] * 8},
         "action": {"mode": "min_max", "min": [-1.0] * 8, "max": [2.0] * 8}}


@pytest.fixture(scope="module")
def local():
    torch.manual_seed(1)
    model = ConvPolicy(8, 8, 5, cameras=1).eval()

    def run(inputs):
        with torch.no_grad():
            return model(*[torch.from_numpy(a) for a in inputs]).numpy()
    return TensorPolicy(META, Normalizer.from_dict(STATS), run, "local")


class Server:
    """An openpi policy server: metadata on connect, then one reply per observation from
    `answer(index, observation)`: bytes or str to send, or "die" to drop the connection and stop
    listening, as a crashed server process does."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        self.server = serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)
        self.port = self.server.socket.getsockname()[1]
        self.uri = f"openpi://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handle(self, ws):
        ws.send(reference.packb({"action_horizon": 5, "server": "test"}))
        for message in ws:
            observation = reference.unpackb(message)
            self.requests.append(observation)
            reply = self.answer(len(self.requests) - 1, observation)
            if reply == "die":
                self.server.socket.close()  # nobody listens any more: reconnecting is refused
                ws.close_socket()  # and the connection drops without a close frame
                return
            ws.send(reply)

    def close(self):
        self.server.shutdown()


@pytest.fixture
def server():
    started = []

    def start(answer):
        started.append(Server(answer))
        return started[-1]
    yield start
    for s in started:
        s.close()


def model_answer(local):
    """What an openpi server around the local model sends back."""
    def answer(index, obs):
        state = np.asarray(obs["state"], float)
        observation = Observation(0.0, {"arm": state[:7]}, {"gripper": state[7]}, {"wrist": obs["images"]["wrist"]})
        actions = local.act(observation).to_array(META.action)
        return reference.packb({"actions": actions.astype(np.float32), "server_timing": {"infer_ms": 1.0}})
    return answer


def observation(seed, stamp=1.0):
    rng = np.random.default_rng(seed)
    return Observation(stamp, {"arm": rng.uniform(-1, 1, 7)}, {"gripper": float(rng.uniform(0, 0.08))},
                       {"wrist": rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)}, task="stack the cubes")


def test_our_msgpack_numpy_and_openpi_clients_read_each_other():
    message = {"state": np.arange(8, dtype=np.float32), "images": {"cam": np.ones((2, 3, 3), np.uint8)},
               "mask": np.array([True, False]), "ids": np.arange(3, dtype=np.int64), "prompt": "pick",
               "scalar": np.float32(0.5), "nested": [1, 2.5, "x"]}
    for pack, unpack in ((remote.packb, reference.unpackb), (reference.packb, remote.unpackb)):
        back = unpack(pack(message))
        for key in ("state", "mask", "ids"):
            assert back[key].dtype == message[key].dtype
            np.testing.assert_array_equal(back[key], message[key])
        np.testing.assert_array_equal(back["images"]["cam"], message["images"]["cam"])
        assert back["prompt"] == "pick" and back["nested"] == [1, 2.5, "x"]
        assert back["scalar"] == np.float32(0.5) and back["scalar"].dtype == np.float32
    with pytest.raises(TypeError, match="cannot be sent"):
        remote.packb({"bad": np.array([object()])})


def test_remote_policy_acts_as_the_local_model(local, server):
    s = server(model_answer(local))
    policy = load_policy(s.uri, META)
    assert policy.server_metadata == {"action_horizon": 5, "server": "test"}
    for seed in range(3):
        obs = observation(seed, stamp=2.0 + seed)
        chunk = policy.act(obs)
        assert chunk.stamp == obs.stamp
        np.testing.assert_allclose(chunk.to_array(META.action), local.act(obs).to_array(META.action),
                                   rtol=0, atol=1e-5)
    sent = s.requests[0]
    assert set(sent) == {"state", "images"} and sent["images"]["wrist"].shape == (24, 32, 3)
    policy.close()


def test_observation_keys_follow_the_servers_names(server):
    s = server(lambda i, obs: reference.packb({"actions": np.zeros((4, 8))}))
    metadata = PolicyMetadata(ObservationSpace({"arm": 7}, ("gripper",), {"wrist": None}, task=True),
                              META.action, 15.0, 4)
    params = {"observation": {"observation/joint_position": "joints.arm", "observation/gripper_position":
                              "gripper.gripper", "observation/wrist_image_left": "image.wrist", "prompt": "task"},
              "image_layout": "chw"}
    policy = load_policy(s.uri, metadata, params)
    obs = observation(0)
    policy.act(obs)
    sent = s.requests[0]
    np.testing.assert_allclose(sent["observation/joint_position"], obs.joints["arm"], rtol=1e-6)
    assert sent["observation/gripper_position"].shape == (1,)
    assert sent["observation/wrist_image_left"].shape == (3, 24, 32)
    assert sent["prompt"] == "stack the cubes"
    with pytest.raises(Exception, match="observation.prompt: expected state, task, joints.<group>"):
        load_policy(s.uri, metadata, {"observation": {"prompt": "text"}})


@pytest.mark.parametrize("reply,match", [
    (b"\xc1\xc1 not msgpack", "the reply is not msgpack"),
    (reference.packb({"action": np.zeros((5, 8))}), r"the reply has no `actions`; .* got \['action'\]"),
    (reference.packb({"actions": np.zeros((5, 3))}), r"actions have shape \(5, 3\); expected \(chunk length, 8\)"),
    (reference.packb({"actions": np.full((5, 8), np.nan)}), "actions contain NaN or Inf"),
    ("Traceback (most recent call last):\n  ...\nValueError: boom\n", "the server failed: ValueError: boom"),
])
def test_garbage_answers_are_clear_errors(server, reply, match):
    s = server(lambda i, obs: reply)
    policy = load_policy(s.uri, META)
    with pytest.raises(PolicyError, match=match):
        policy.act(observation(0))


def test_a_server_that_dies_is_an_error_and_the_runtime_holds(local, server):
    s = server(lambda i, obs: model_answer(local)(i, obs) if i == 0 else "die")
    policy = load_policy(s.uri, META)
    runtime = PolicyRuntime(policy, RuntimeConfig(asynchronous=False, replan_steps=1))
    first = runtime.step(1.0, observation(0, stamp=1.0))
    assert not first.holding
    held = runtime.step(1.1, observation(1, stamp=1.1))
    assert held.reason.startswith(f"policy error: ws://127.0.0.1:{s.port}: the server closed the connection")
    np.testing.assert_array_equal(held.joints["arm"], first.joints["arm"])  # holds the last command
    again = runtime.step(1.25, observation(2, stamp=1.25))  # the next try finds nobody listening
    assert "cannot connect" in again.reason and runtime.stats.errors == 2
    np.testing.assert_array_equal(again.joints["arm"], first.joints["arm"])


def test_a_server_that_does_not_answer_in_time_is_an_error(server):
    gate = threading.Event()
    s = server(lambda i, obs: gate.wait(5) and reference.packb({"actions": np.zeros((5, 8))}))
    policy = load_policy(s.uri, META, {"timeout_s": 0.2})
    with pytest.raises(PolicyError, match="no reply within 0.2 s"):
        policy.act(observation(0))
    gate.set()


def test_nothing_listening_fails_at_load():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PolicyError, match=f"ws://127.0.0.1:{port}: cannot connect"):
        load_policy(f"openpi://127.0.0.1:{port}", META, {"connect_timeout_s": 1.0})
    with pytest.raises(PolicyError, match="is not openpi://HOST:PORT"):
        load_policy("openpi://host:port/path", META)


def test_policy_node_holds_when_its_server_dies(server):
    """policy_node in this process over ROS: it follows the server, then holds once the server dies."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from r2s2r.contract import Topics, qos
    from r2s2r.nodes.policy_node import PolicyNode
    from r2s2r.nodes.runtime import PrivateGraph

    fr3 = get_robot("franka_fr3")
    target = fr3.home_positions + 0.05
    alive = threading.Event()
    alive.set()
    s = server(lambda i, obs: reference.packb({"actions": np.tile([*target, 0.03], (10, 1))})
               if alive.is_set() else "die")
    with PrivateGraph(threads=2) as graph:
        node = graph.own(PolicyNode(context=graph.context, parameter_overrides=[
            Parameter("robot", value="franka_fr3"), Parameter("policy", value=s.uri),
            Parameter("autostart", value=True), Parameter("command_rate_hz", value=50.0),
            Parameter("replan_steps", value=2)]))
        peer = graph.own(Node("policy_test_peer", context=graph.context))
        commands, diagnostics = [], []
        peer.create_subscription(Float64MultiArray, Topics.streaming_commands("arm"),
                                 lambda m: commands.append((time.monotonic(), np.array(m.data))), qos.COMMAND)
        peer.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, diagnostics.append, qos.DIAGNOSTICS)
        states = peer.create_publisher(JointState, Topics.JOINT_STATES, qos.STATE)
        names = list(fr3.group("arm").joints + fr3.gripper_joint_names)

        def publish_state():
            msg = JointState(name=names, position=[*fr3.home_positions, 0.04, 0.04])
            msg.header.stamp = peer.get_clock().now().to_msg()
            states.publish(msg)
        peer.create_timer(0.02, publish_state)
        graph.spin()

        def wait_for(predicate, timeout=20.0):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not predicate():
                time.sleep(0.02)
            return predicate()

        assert wait_for(lambda: commands and np.allclose(commands[-1][1], target))
        alive.clear()
        assert wait_for(lambda: node.runtime.stats.errors > 0)
        died = time.monotonic()
        assert wait_for(lambda: sum(t > died + 0.3 for t, _ in commands) >= 5)
        assert all(np.allclose(c, target) for t, c in commands if t > died)  # holds the last target
        assert wait_for(lambda: any(st.level == b"\x02" and "policy error" in st.message
                                    for m in diagnostics for st in m.status))


def test_a_server_that_stops_answering_is_a_recorded_deadline_and_the_campaign_goes_on(server, tmp_path):
    """In-process, the simulated clock waits for inference, so a deadline is the server's own
    timeout: a trial whose server goes silent ends at stage `deadline`, with the message and the
    time, while the arm holds; the campaign's next trial, answered, runs as usual."""
    from r2s2r.eval.runner import Planned, TrialSpec, run_trials
    from r2s2r.eval.store import TrialStore
    from tests.image_policies import TASK
    silent_from = [2]  # the request from which the server goes silent; None: it answers

    def hold(index, obs):  # hold where the arm stands (the state's arm and gripper), until silent
        if silent_from[0] is not None and index >= silent_from[0]:
            time.sleep(1.0)  # past the client's timeout; the late reply goes to a dropped connection
        return reference.packb({"actions": np.tile(np.asarray(obs["state"], np.float32), (10, 1))})
    s = server(hold)
    config = tmp_path / "remote.yaml"
    config.write_text(f"uri: {s.uri}\nparams: {{timeout_s: 0.3}}\n")
    planned = [Planned(0, TrialSpec.of(str(config), TASK, {"block_y": 0.2}, seed=0))]
    with TrialStore(tmp_path / "store.sqlite") as store:
        (late,) = run_trials(planned, store, "c", progress=False)
        silent_from[0] = None  # a server that answers in time
        (answered,) = run_trials([Planned(0, TrialSpec.of(str(config), TASK, {"block_y": -0.2}, seed=1))], store,
                                 "d", progress=False)
    assert late.stage == "deadline" and not late.success, (late.stage, late.detail)
    assert late.detail.endswith("no reply within 0.3 s (at 1.000 s)"), late.detail  # the third request
    assert answered.stage == "missed_aim" and answered.detail == "", (answered.stage, answered.detail)
