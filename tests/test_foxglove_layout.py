"""The shipped Foxglove layout (config/foxglove/r2s2r.json) and RViz configuration
(config/rviz/r2s2r.rviz): well formed, every panel placed configured, and the topics they show
are what a twin publishes and what a recorded episode holds (checked on the live graph in
test_graph_contract and on a recorded bag in test_record_episode). Neither viewer runs here
(docs/ros.md)."""

from __future__ import annotations

import json

import yaml

from tests.ros_helpers import REPO

LAYOUT = REPO / "config" / "foxglove" / "r2s2r.json"


def layout_topics() -> set[str]:
    """Every topic a panel of the layout reads."""
    config = json.loads(LAYOUT.read_text())["configById"]
    topics = set()
    for panel, settings in config.items():
        kind = panel.split("!")[0]
        if kind == "3D":
            topics |= set(settings["topics"])
            topics |= {layer["topic"] for layer in settings["layers"].values() if layer.get("sourceType") == "topic"}
        elif kind == "Image":
            topics |= {settings["imageMode"]["imageTopic"], settings["imageMode"]["calibrationTopic"]}
        elif kind == "Plot":
            topics |= {path["value"].split(".")[0] for path in settings["paths"]}
        elif kind == "DiagnosticSummary":
            topics.add(settings["topicToRender"])
    return topics


def _leaves(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    return _leaves(node["first"]) + _leaves(node["second"])


def test_the_layout_places_configured_panels_on_the_interfaces_topics():
    layout = json.loads(LAYOUT.read_text())
    assert sorted(_leaves(layout["layout"])) == sorted(layout["configById"])
    assert layout_topics() == {"/robot_description", "/cameras/scene/image_raw", "/cameras/scene/camera_info",
                               "/joint_states", "/diagnostics"}
    three_d = layout["configById"]["3D!r2s2r"]
    assert three_d["followTf"] == "world"  # the frame the driver publishes everything under


def test_the_rviz_configuration_shows_the_robot_its_frames_and_the_scene_camera_in_the_world():
    config = yaml.safe_load((REPO / "config" / "rviz" / "r2s2r.rviz").read_text())["Visualization Manager"]
    displays = {d["Class"]: d for d in config["Displays"]}
    assert config["Global Options"]["Fixed Frame"] == "world"
    model = displays["rviz_default_plugins/RobotModel"]
    assert model["Description Source"] == "Topic"
    assert model["Description Topic"]["Value"] == "/robot_description"
    assert model["Description Topic"]["Durability Policy"] == "Transient Local"  # it is latched
    assert "rviz_default_plugins/TF" in displays
    assert displays["rviz_default_plugins/Camera"]["Topic"]["Value"] in layout_topics()
