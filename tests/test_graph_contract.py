"""Every registered robot's twin offers exactly the interface the contract promises for its
groups and grippers: topic names, types, services and QoS. Parametrised over the registry,
so a robot added later is checked by this same test."""

import pytest

from r2s2r.contract import qos
from r2s2r.contract.interface import driver_interface
from r2s2r.robots import registry
from r2s2r.sim.moveit import controllers as moveit_controllers
from tests.graph import absolute, node_interface, qos_of
from tests.test_foxglove_layout import layout_topics

ROBOTS = sorted(registry())


@pytest.mark.parametrize("robot_name", ROBOTS)
def test_twin_graph_is_exactly_the_contract(robot_name, tmp_path, stack_process, ros_client):
    robot = registry()[robot_name]
    stack = tmp_path / "stack.yaml"
    stack.write_text(f"nodes:\n  - name: driver\n    executable: driver_node\n"
                     f"    parameters:\n      - {{robot: {robot_name}, camera_rate_hz: 5.0}}\n")
    proc = stack_process(stack)
    client = ros_client()
    contract = driver_interface(robot.group_names, [g.name for g in robot.grippers], simulated=True,
                                cameras=[c.name for c in robot.cameras])
    want_pubs = {absolute(n, "/", "driver"): t for n, t in contract.publishers.items()}
    want_subs = {absolute(n, "/", "driver"): t for n, t in contract.subscriptions.items()}
    want_srvs = {absolute(n, "/", "driver"): t for n, t in contract.services.items()}
    want_actions = {absolute(n, "/", "driver"): t for n, t in contract.actions.items()}
    pubs, subs, srvs, actions = node_interface(client.node, "driver", expect_topics=len(want_pubs) + len(want_subs))
    assert proc.proc.poll() is None, proc.output
    assert pubs == want_pubs
    assert subs == want_subs
    assert srvs == want_srvs
    assert actions == want_actions
    # MoveIt's controllers, as `r2s2r robots moveit` writes them, are actions this driver serves.
    manager = moveit_controllers(robot)["moveit_simple_controller_manager"]
    assert {f"/{name}/{manager[name]['action_ns']}" for name in manager["controller_names"]} == set(actions)
    # The shipped Foxglove layout's topics are this twin's, where it has a camera named scene.
    if "scene" in [c.name for c in robot.cameras]:
        assert layout_topics() <= set(pubs)
    # QoS as the contract sets it: reliable state and commands, best-effort images, latched estop.
    reliable = str(qos.STATE.reliability)
    assert qos_of(client.node, "/joint_states", publisher=True)[0][0] == reliable
    assert qos_of(client.node, "/estop", publisher=False)[0][1] == str(qos.LATCHED.durability)
    for cam in robot.cameras:
        assert qos_of(client.node, f"/cameras/{cam.name}/image_raw", publisher=True)[0][0] == \
            str(qos.SENSOR.reliability)
