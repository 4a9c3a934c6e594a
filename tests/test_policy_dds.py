"""Over DDS: `r2s2r up config/stacks/franka_fr3_policy_sim.yaml` runs the FR3 twin and policy_node
with scripted:goto; ~/start drives the arm through driver_node to the goal."""

import time

import numpy as np
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from r2s2r.contract import Topics, qos
from r2s2r.paths import config_path
from r2s2r.policy import read_policy_config
from r2s2r.robots import get_robot

FR3 = get_robot("franka_fr3")
ARM = FR3.group("arm").joints
GOAL = np.array(read_policy_config(str(config_path("policies", "franka_goto.yaml"))).params["goal"]["arm"])


def trigger(client, service: str) -> Trigger.Response:
    """Call one of policy_node's std_srvs/Trigger services (/policy/start, stop, reset)."""
    srv = client.node.create_client(Trigger, f"policy/{service}")
    try:
        assert srv.wait_for_service(timeout_sec=10), f"no service {srv.srv_name}"
        future = srv.call_async(Trigger.Request())
        assert client.wait_for(future.done, 10), f"{srv.srv_name} did not answer"
        return future.result()
    finally:
        client.node.destroy_client(srv)


def policy_status(client):
    for msg in reversed(client.diagnostics()):
        for status in msg.status:
            if status.name.startswith("r2s2r/policy/"):
                return status.message, {kv.key: kv.value for kv in status.values}
    return None


def test_policy_node_drives_the_twin_to_the_goal(stack_process, ros_client):
    stack = stack_process("config/stacks/franka_fr3_policy_sim.yaml")
    client = ros_client()
    streamed = []  # when each of the policy's streaming commands reached this client
    client.node.create_subscription(Float64MultiArray, Topics.streaming_commands("arm"),
                                    lambda _: streamed.append(time.monotonic()), qos.COMMAND)
    start = client.wait_for_joint_states(60).positions_of(ARM)
    assert np.max(np.abs(start - GOAL)) > 0.3
    assert client.wait_for_subscriber(Topics.position_commands("arm"), Float64MultiArray, 30)
    # Before ~/start the policy only observes: the arm stays where it is.
    assert client.wait_for(lambda: policy_status(client) is not None, 10), stack.output
    assert policy_status(client)[0] == "stopped (call ~/start)"
    np.testing.assert_allclose(client.positions(ARM), start, atol=1e-4)

    reply = trigger(client, "start")
    assert reply.success and reply.message.startswith("started scripted:goto from a fresh episode"), reply.message
    assert client.wait_until_at(ARM, GOAL, 1e-3, 30), (client.positions(ARM) - GOAL, stack.output)
    fingers = FR3.gripper_joint_names
    assert client.wait_for(lambda: abs(client.positions(fingers).sum() - 0.04) < 2e-3, 10)
    assert client.wait_for(lambda: int(policy_status(client)[1]["inferences"]) > 2, 10)
    assert client.wait_for(lambda: policy_status(client)[0] == "running", 10), policy_status(client)
    values = policy_status(client)[1]
    assert values["errors"] == "0" and values["last_error"] == ""
    for key in ("latency_p50_ms", "latency_p99_ms", "observation_age_ms", "deadline_misses", "stale_observations"):
        assert float(values[key]) >= 0, key  # reported (their size is the benchmark's business)

    # ~/stop: the policy lets go, and another client's command moves the arm again.
    assert trigger(client, "stop").success
    assert trigger(client, "reset").success
    # The policy's last commands may still be on their way to the driver (they come from another
    # writer than this client's, so DDS does not order them): once the stream has been quiet for
    # half a second, a command sent from here is the last the driver takes.
    assert streamed and client.wait_for(lambda: time.monotonic() - streamed[-1] > 0.5, 30)
    home = FR3.home_positions
    client.send_positions("arm", home)
    assert client.wait_until_at(ARM, home, 1e-3, 30), (client.positions(ARM) - home, stack.output[-3000:])
