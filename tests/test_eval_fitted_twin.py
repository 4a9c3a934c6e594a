"""A fitted twin is evaluated as fitted: a task whose scene names a dynamics file (what
`r2s2r align --fit` writes) runs in the evaluation engine with the fitted servo gains as its
baseline, and an actuator_gain perturbation scales those, not the RobotSpec's nominal ones.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from r2s2r.eval.runner import TrialObserver, TrialSpec, TrialWorker
from r2s2r.robots import get_robot
from r2s2r.sim.scene import load_scene
from tests.eval_helpers import HOLD, PERTURBATIONS, TASK

FR3 = get_robot("franka_fr3")
KP_FIT, KV_FIT = 1.3, 0.7  # the fitted gains, as multiples of the nominal ones


@pytest.fixture(scope="module")
def fitted_task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fitted")
    group = FR3.groups[0]
    joints = {j: {"kp": float(kp * KP_FIT), "kv": float(kv * KV_FIT)} for j, kp, kv in zip(group.joints, group.kp, group.kv)}
    (folder / "fr3_dynamics.yaml").write_text(yaml.safe_dump({"robot": "franka_fr3", "joints": joints}))
    space = dict(PERTURBATIONS, factors=PERTURBATIONS["factors"] + [
        {"name": "gains", "kind": "actuator_gain", "range": [0.5, 1.5]}])
    (folder / "perturbations.yaml").write_text(yaml.safe_dump(space))
    scene = dict(TASK["scene"], dynamics=str(folder / "fr3_dynamics.yaml"))
    (folder / "scene.yaml").write_text(yaml.safe_dump(scene))
    path = folder / "fitted_hazards.yaml"
    path.write_text(yaml.safe_dump(dict(TASK, name="fitted_hazards", scene=scene)))
    return str(path)


class GainsAtStart(TrialObserver):
    def start(self, twin, loop, task):
        act = [twin.model.actuator(j).id for j in FR3.joint_names]
        self.kp = twin.model.actuator_gainprm[act, 0].copy()
        self.kv = -twin.model.actuator_biasprm[act, 2].copy()


def test_a_scene_with_fitted_dynamics_hashes_and_compares_by_value(fitted_task):
    scene_file = str(Path(fitted_task).parent / "scene.yaml")
    a, b = load_scene(scene_file), load_scene(scene_file)
    assert a.dynamics is not None and a == b and hash(a) == hash(b)


@pytest.mark.parametrize("scale", [1.0, 0.8])
def test_the_fitted_gains_are_the_baseline_a_perturbation_scales(fitted_task, scale):
    nominal_kp = np.array([kp for g in FR3.groups for kp in g.kp])
    nominal_kv = np.array([kv for g in FR3.groups for kv in g.kv])
    worker = TrialWorker()
    observer = GainsAtStart()
    # A trial at another scale first: the twin is cached and reused, its gains must not stick.
    worker.run(TrialSpec.of(HOLD, fitted_task, {"gains": 1.5}), GainsAtStart())
    result = worker.run(TrialSpec.of(HOLD, fitted_task, {"gains": scale}), observer)
    assert result.stage in ("success", "too_near", "hazard"), result
    np.testing.assert_allclose(observer.kp, nominal_kp * KP_FIT * scale, rtol=1e-12)
    np.testing.assert_allclose(observer.kv, nominal_kv * KV_FIT * scale, rtol=1e-12)


class Trajectory(TrialObserver):
    """Each policy tick's time, command and the arm's joint positions after the tick."""

    def start(self, twin, loop, task):
        self.loop, self.ticks = loop, []

    def tick(self, twin, loop, observation, command):
        self.ticks.append((observation.stamp, command, loop.sample().positions_of(FR3.joint_names).copy()))


def test_an_evaluation_of_a_fitted_scene_moves_as_the_driver_steps_the_fitted_twin(fitted_task, tmp_path):
    """The chain a fitted cell's evaluation runs: the scene names the fitted dynamics, the runner's
    trial follows a moving target, and the same commands stepped through the driver's own core
    (SimHardware of the scene, Driver) give the same joint positions, bit for bit; the nominal
    twin's differ (its stiffer servos lag less)."""
    from r2s2r.eval.runner import send_command
    from r2s2r.eval.tasks import load_task
    from r2s2r.hardware.driver import Driver
    from r2s2r.hardware.sim import SimHardware

    goal = FR3.home_positions + np.array([0.4, 0.3, 0.0, -0.3, 0.0, 0.3, 0.0])
    policy = tmp_path / "goto.yaml"
    policy.write_text(yaml.safe_dump({"uri": "scripted:goto", "params": {"goal": {"arm": goal.tolist()}}}))
    spec = TrialSpec.of(str(policy), fitted_task, {}, seed=3)
    trial = Trajectory()
    TrialWorker().run(spec, trial)
    assert len(trial.ticks) >= 3

    def driven(scene) -> np.ndarray:
        driver = Driver(SimHardware(scene, seed=spec.seed))
        driver.start()
        driver.hold_here()
        positions = []
        for k, (now, command, _) in enumerate(trial.ticks):
            assert driver.hardware.now == now
            if command is not None:
                assert send_command(driver, command) == []
            sample = driver.step(trial.ticks[k + 1][0] if k + 1 < len(trial.ticks) else now + 1.0 / 20.0)
            positions.append(sample.positions_of(FR3.joint_names).copy())
        return np.array(positions)
    scene = load_task(fitted_task).scene()
    assert scene.dynamics is not None
    recorded = np.array([p for _, _, p in trial.ticks])
    assert np.array_equal(driven(scene), recorded)
    nominal = driven(replace(scene, dynamics=None))
    assert np.max(np.abs(nominal - recorded)) > 1e-4
