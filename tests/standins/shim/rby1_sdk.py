"""`import rby1_sdk` as the stand-in (ahead of the real SDK on the path), with one RB-Y1 at home
pose on its simulated network, so that driver_node can run against it in a process of its own
(the DDS conformance tests). There is no gripper bus: set rby1.gripper_device to ''.

    PYTHONPATH=tests/standins/shim:. r2s2r up config/stacks/rby1_real.yaml \\
        -p rby1.address:=127.0.0.1:50051 -p rby1.gripper_device:=''

R2S2R_STANDIN_ADDRESS sets the robot's address (default 127.0.0.1:50051).
"""

import os
import sys

from r2s2r.robots import get_robot
from tests.standins import rby1_sdk_standin as standin

_home = get_robot("rby1").home
standin.world.add_robot(os.environ.get("R2S2R_STANDIN_ADDRESS", "127.0.0.1:50051"),
                        [_home.get(name, 0.0) for name in standin.JOINT_NAMES])  # the wheels at 0
sys.modules[__name__] = standin
