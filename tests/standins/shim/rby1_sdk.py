"""`import rby1_sdk` as the stand-in (ahead of the real SDK on the path), with one RB-Y1 at home
pose on its simulated network, so that driver_node can run against it in a process of its own
(the DDS conformance tests). With R2S2R_STANDIN_GRIPPER_DEVICE set to a path (a file that
exists, as the UPC's device node would), the robot has its Dynamixel gripper bus there;
without it there is none: set rby1.gripper_device to ''.

    PYTHONPATH=tests/standins/shim:. r2s2r up config/stacks/rby1_real.yaml \\
        -p rby1.address:=127.0.0.1:50051 -p rby1.gripper_device:=''

R2S2R_STANDIN_ADDRESS sets the robot's address (default 127.0.0.1:50051).
"""

import os
import sys

from r2s2r.robots import get_robot
from tests.standins import rby1_sdk_standin as standin

_home = get_robot("rby1").home
_address = os.environ.get("R2S2R_STANDIN_ADDRESS", "127.0.0.1:50051")
standin.world.add_robot(_address, [_home.get(name, 0.0) for name in standin.JOINT_NAMES])  # the wheels at 0
if os.environ.get("R2S2R_STANDIN_GRIPPER_DEVICE"):
    standin.world.add_gripper_bus(os.environ["R2S2R_STANDIN_GRIPPER_DEVICE"], _address)
sys.modules[__name__] = standin
