"""`import flexivrdk` as the stand-in, with one Rizon 4 at home pose on its simulated network, so
that driver_node can run against it in a process of its own (the DDS conformance tests):

    PYTHONPATH=tests/standins/shim:. r2s2r up config/stacks/flexiv_rizon4_real.yaml \\
        -p flexiv.serial_number:=Rizon4-062468

R2S2R_STANDIN_SERIAL sets the arm's serial number (default Rizon4-062468).
"""

import os
import sys

from r2s2r.robots import get_robot
from tests.standins import flexivrdk_standin as standin

standin.world.add_arm(os.environ.get("R2S2R_STANDIN_SERIAL", "Rizon4-062468"),
                      get_robot("flexiv_rizon4").home_positions)
sys.modules[__name__] = standin
