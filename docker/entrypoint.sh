#!/usr/bin/env bash
# Source ROS 2 Jazzy and the r2s2r workspace, then run the command.
set -e
source /opt/ros/jazzy/setup.bash
source /ws/install/setup.bash
exec "$@"
