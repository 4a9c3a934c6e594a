"""The MuJoCo twin: scenes from YAML, deterministic stepping, rendering, privileged state."""

from r2s2r.sim.scene import Scene, load_scene
from r2s2r.sim.twin import Contact, Twin

__all__ = ["Scene", "load_scene", "Twin", "Contact"]
