"""Reading a live ROS graph: what one node publishes, subscribes and serves, with QoS."""

from __future__ import annotations

import time

# Every rclpy node has these; they are not part of the driver's contract.
ROS_INFRASTRUCTURE_TOPICS = {"/rosout", "/parameter_events"}
ACTION_PART = "/_action/"
PARAMETER_SERVICES = {"describe_parameters", "get_parameter_types", "get_parameters", "list_parameters",
                      "set_parameters", "set_parameters_atomically", "get_type_description"}


def absolute(name: str, namespace: str, node: str) -> str:
    if name.startswith("/"):
        return name
    if name.startswith("~/"):
        return f"{namespace.rstrip('/')}/{node}/{name[2:]}"
    return f"{namespace.rstrip('/')}/{name}"


def nodes_named(client_node, node: str, namespace: str = "/") -> int:
    """How many nodes of this name the client's graph lists now."""
    return sum(1 for name, space in client_node.get_node_names_and_namespaces() if (name, space) == (node, namespace))


def node_interface(client_node, node: str, namespace: str = "/", timeout: float = 60.0, expect_topics: int = 0):
    """(publishers, subscriptions, services, actions) of `node`: dicts of absolute name -> type string.

    The graph names a node only once its participant's ros_discovery_info arrives, which can
    trail its endpoints by many seconds on a loaded host; and a participant that lived through
    an earlier node of the same name may still list it, without endpoints, long after it
    stopped (read with a client made after that). So a read counts only while exactly one node
    has the name."""
    deadline = time.monotonic() + timeout
    previous, seen, named = None, ({}, {}, {}), 0
    while time.monotonic() < deadline:
        named = nodes_named(client_node, node, namespace)
        if named == 1:
            try:
                seen = (
                    dict((n, t[0]) for n, t in client_node.get_publisher_names_and_types_by_node(node, namespace)),
                    dict((n, t[0]) for n, t in client_node.get_subscriber_names_and_types_by_node(node, namespace)),
                    dict((n, t[0]) for n, t in client_node.get_service_names_and_types_by_node(node, namespace)))
            except Exception:  # rclpy's NodeNameNonExistentError: it left the graph between the calls
                seen = ({}, {}, {})
            pubs, subs, srvs = seen
            # Discovery trickles in: wait for at least what is expected, then for one quiet read.
            if len(pubs) + len(subs) >= expect_topics and srvs and seen == previous:
                break
            previous = seen
        time.sleep(0.3)
    else:
        raise AssertionError(f"node {namespace.rstrip('/')}/{node}: no steady read within {timeout:.0f} s "
                             f"({named} nodes of that name in the graph; expected one, with at least "
                             f"{expect_topics} topics and a service; last read {seen})")
    pubs, subs, srvs = seen
    # An action's goal, cancel and result services and its feedback and status topics (`/_action/`)
    # are read as the action itself.
    pubs = {n: t for n, t in pubs.items() if n not in ROS_INFRASTRUCTURE_TOPICS and ACTION_PART not in n}
    subs = {n: t for n, t in subs.items() if n not in ROS_INFRASTRUCTURE_TOPICS and ACTION_PART not in n}
    srvs = {n: t for n, t in srvs.items() if n.rsplit("/", 1)[-1] not in PARAMETER_SERVICES and ACTION_PART not in n}
    return pubs, subs, srvs, action_servers(client_node, node, namespace)


def action_servers(client_node, node: str, namespace: str = "/") -> dict[str, str]:
    """The actions `node` serves: absolute name -> type string."""
    from rclpy.action import get_action_server_names_and_types_by_node
    return {n: t[0] for n, t in get_action_server_names_and_types_by_node(client_node, node, namespace)}


def qos_of(client_node, topic: str, publisher: bool):
    infos = (client_node.get_publishers_info_by_topic if publisher else client_node.get_subscriptions_info_by_topic)(topic)
    return sorted((str(i.qos_profile.reliability), str(i.qos_profile.durability), i.qos_profile.depth) for i in infos)
