"""Real to sim: record what a real cell did, reconstruct its scene, replay the same commands in the
twin, measure the disagreement and fit the twin's parameters until it is small (docs/real2sim.md)."""
