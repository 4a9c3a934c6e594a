"""The trial runner and its store: determinism, worker counts, resume after kill -9, Ray.

Trials run a synthetic task (tests/eval_helpers.py): a real twin and trial loop, a fifth of a
second each, with failure regions known in closed form."""

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from r2s2r.eval.runner import Planned, TrialSpec, TrialWorker, plan_eval, run_trials, trial_seed
from r2s2r.eval.store import StoreError, TrialStore
from r2s2r.eval.tasks import load_task
from tests.eval_helpers import HOLD, REPO, expected_margin, subprocess_env, synthetic_task


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    return str(synthetic_task(tmp_path_factory.mktemp("synthetic")))


def rows(store):
    return sorted(r.deterministic() for r in store.results())


def test_a_trial_gives_the_same_result_bit_for_bit_whatever_ran_before(task_file):
    a = TrialSpec.of(HOLD, task_file, {"block_x": -0.1, "block_y": 0.03}, seed=7)
    b = TrialSpec.of(HOLD, task_file, {"block_x": 0.12, "block_colour": 2.0, "light": 0.6}, seed=8)
    worker = TrialWorker()
    first, _, again = worker.run(a), worker.run(b), worker.run(a)  # the twin of `a` is reused for `again`
    fresh = TrialWorker().run(a)
    assert first.deterministic() == again.deterministic() == fresh.deterministic()
    assert first.margin == fresh.margin  # bit for bit, not approximately
    assert first.wall_s > 0 and first.sim_time_s == pytest.approx(0.2)
    # The margin comes from the block's position in the twin after the trial's physics.
    margin, stage = expected_margin(-0.1, 0.03)
    assert (first.success, first.stage) == (False, stage) == (False, "too_near")
    assert first.margin == pytest.approx(margin, abs=2e-3)
    assert first.id == a.id and first.id != b.id
    assert TrialSpec.of(HOLD, task_file, {"block_x": -0.1, "block_y": 0.03}, seed=8).id != a.id


def test_a_trial_whose_physics_blows_up_ends_as_sim_unstable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo logs its warning to MUJOCO_LOG.TXT in the working directory
    unstable = synthetic_task(tmp_path, explode=True)
    result = TrialWorker().run(TrialSpec.of(HOLD, str(unstable), {"block_x": 0.1}))
    assert (result.success, result.stage, result.margin) == (False, "sim_unstable", 0.0)
    # Blown up by the first tick's judging, found (and ended) at the second: not run to 0.2 s.
    assert result.metrics["unstable_at_tick"] == 2.0
    assert (tmp_path / "MUJOCO_LOG.TXT").read_text().count("The simulation is unstable") == 1


def test_trial_ids_hash_exactly_the_inputs():
    spec = TrialSpec.of("scripted:hold", "t", {"b": 0.1, "a": 1}, 3)
    assert spec.perturbation == (("a", 1.0), ("b", 0.1))
    assert spec.id == TrialSpec.of("scripted:hold", "t", {"a": 1.0, "b": 0.1}, 3).id
    assert spec.id != TrialSpec.of("scripted:hold", "t", {"a": 1.0, "b": math.nextafter(0.1, 1.0)}, 3).id
    assert spec.id != TrialSpec.of("scripted:hold", "t", {"a": 1.0, "b": 0.1}, 3, control_rate_hz=500).id
    assert trial_seed(0, 1) == trial_seed(0, 1) != trial_seed(0, 2) != trial_seed(1, 2)


def test_one_and_two_workers_store_identical_rows(task_file, tmp_path):
    task = load_task(task_file)
    planned = plan_eval(HOLD, task, 10, seed=3, task_ref=task_file)
    assert len({p.spec.id for p in planned}) == 10
    with TrialStore(tmp_path / "one.sqlite") as one, TrialStore(tmp_path / "two.sqlite") as two:
        run_trials(planned, one, "c", workers=1, progress=False)
        results = run_trials(planned, two, "c", workers=2, progress=False)
        assert rows(one) == rows(two)
        assert [r.id for r in results] == [p.spec.id for p in planned]  # plan order, not finishing order
        assert {r.stage for r in results} >= {"success", "too_near"}
        # Resuming a finished campaign runs nothing.
        before = [r.wall_s for r in two.results()]
        run_trials(planned, two, "c", workers=2, progress=False)
        assert [r.wall_s for r in two.results()] == before and two.count() == 10


def _stored(path) -> int:
    if not path.is_file():
        return 0
    try:  # read-write: a read-only connection to a WAL database the campaign has open can fail to open
        db = sqlite3.connect(str(path), timeout=5)
        try:
            return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:  # the schema is being created
        return 0


def test_a_campaign_killed_with_sigkill_resumes_without_losing_or_repeating_a_trial(task_file, tmp_path):
    trials = 60
    out = tmp_path / "killed"
    args = [sys.executable, "-m", "r2s2r.cli", "eval", "--task", task_file, "--policy", HOLD, "--trials", str(trials),
            "--workers", "2", "--seed", "5", "--out", str(out), "--no-images", "--no-progress"]
    proc = subprocess.Popen(args, cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    store_path = out / "trials.sqlite"
    deadline = time.monotonic() + 120
    while _stored(store_path) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the campaign and its pool workers, mid-run
    output = proc.communicate()[0].decode()
    killed_at = _stored(store_path)
    assert 5 <= killed_at < trials, f"the campaign was not killed mid-run ({killed_at} stored):\n{output}"

    resumed = subprocess.run(args, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "report:" in resumed.stdout

    reference = tmp_path / "reference.sqlite"
    with TrialStore(reference) as ref, TrialStore(store_path) as store:
        run_trials(plan_eval(HOLD, load_task(task_file), trials, seed=5, task_ref=task_file), ref, "r", progress=False)
        assert rows(store) == rows(ref)  # nothing lost, nothing changed
        assert store.count() == trials  # nothing doubled
        (campaign,) = store.campaigns()
        assert store.count(campaign) == trials
        assert len({r.id for r in store.results(campaign)}) == trials


def test_ctrl_c_stops_a_campaign_cleanly_and_the_same_command_resumes_it(task_file, tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) mid-campaign: one line
    saying how many trials are stored and how to resume, exit code 130, no traceback from the
    parent or its workers, no leaked semaphores; the same command then finishes the campaign.
    Enough trials that a loaded machine cannot finish them all before the test sees five stored
    (with 60, three runs of the suite on a loaded machine saw the campaign end first)."""
    trials = 400
    out = tmp_path / "interrupted"
    args = [sys.executable, "-m", "r2s2r.cli", "eval", "--task", task_file, "--policy", HOLD, "--trials", str(trials),
            "--workers", "2", "--out", str(out), "--no-images", "--no-progress"]
    # Started as a terminal's shell starts a command: SIGINT at its default (an ignored SIGINT is
    # inherited, and a process started with it ignored keeps ignoring it, as nohup intends).
    proc = subprocess.Popen(args, cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    store_path = out / "trials.sqlite"
    deadline = time.monotonic() + 120
    while _stored(store_path) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the campaign ended before 5 trials were seen stored ({_stored(store_path)})"
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    stored = _stored(store_path)
    assert proc.returncode == 130, stdout + stderr
    assert 5 <= stored < trials, f"not stopped mid-run ({stored} stored):\n{stderr}"
    assert f"stopped; {stored} trials stored in {store_path}; rerun the same command to resume" in stderr, stderr
    assert "Traceback" not in stderr and "leaked" not in stderr, stderr

    resumed = subprocess.run(args, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with TrialStore(store_path) as store:
        assert store.count() == trials


def test_a_resumed_campaigns_rate_counts_only_this_runs_trials():
    from r2s2r.eval.runner import add_stored, progress_bar
    bar = progress_bar(10, "resumed")
    bar.mininterval, bar.miniters = 0.0, 1  # every update reaches the rate
    add_stored(bar, 6)  # found in the store
    assert bar.n == 6 and bar.format_dict["initial"] == 6
    bar.update(1)
    assert bar.n == 7 and bar._ema_dn() == pytest.approx(1.0)  # the rate's steps: only the trial run here
    bar.close()


def test_a_campaign_resumed_with_other_settings_is_refused(tmp_path):
    with TrialStore(tmp_path / "s.sqlite") as store:
        store.open_campaign("c", {"trials": 10, "seed": 0})
        store.open_campaign("c", {"trials": 10, "seed": 0})  # same settings: resume
        with pytest.raises(StoreError, match="seed differ"):
            store.open_campaign("c", {"trials": 10, "seed": 1})
        with pytest.raises(StoreError, match="no trial with id 'ffff'"):
            store.find("ffff")


def test_bad_runner_arguments_say_what_was_expected(task_file, tmp_path):
    planned = [Planned(0, TrialSpec.of(HOLD, task_file))]
    with TrialStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(ValueError, match="expected one of process, ray"):
            run_trials(planned, store, "c", backend="dask")
        with pytest.raises(ValueError, match="expected 1 or more"):
            run_trials(planned, store, "c", workers=0)
    with pytest.raises(Exception, match="unknown factor"):
        TrialWorker().run(TrialSpec.of(HOLD, task_file, {"block_z": 0.1}))


def test_the_ray_backend_on_a_local_instance_gives_the_process_pools_rows(task_file, tmp_path):
    assert "ray" not in sys.modules  # the backend imports it, set up for a loopback instance
    task = load_task(task_file)
    planned = plan_eval(HOLD, task, 6, seed=11, task_ref=task_file)
    os.environ["PYTHONPATH"] = subprocess_env()["PYTHONPATH"]  # Ray's workers import the task's logic module
    try:
        with TrialStore(tmp_path / "pool.sqlite") as pool, TrialStore(tmp_path / "ray.sqlite") as on_ray:
            run_trials(planned, pool, "c", workers=2, progress=False)
            # No address: the backend starts a local Ray instance (loopback, 2 CPUs) for the campaign.
            run_trials(planned, on_ray, "c", workers=2, backend="ray", progress=False)
            import ray
            assert ray.is_initialized()
            assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
            assert rows(pool) == rows(on_ray)
    finally:
        sys.modules["ray"].shutdown()


def test_the_eval_command_ranks_several_policies_on_the_same_trials(task_file, tmp_path, capsys):
    from r2s2r.cli import main
    from r2s2r.robots import get_robot
    goto = tmp_path / "goto_home.yaml"  # holds the arm at home too: the same outcomes as hold
    home = [float(v) for v in get_robot('franka_fr3').home_positions]
    goto.write_text(f"uri: scripted:goto\nparams:\n  goal: {{arm: {home}}}\n")
    out = tmp_path / "eval"
    assert main(["eval", "--task", task_file, "--policy", HOLD, "--policy", str(goto), "--trials", "8",
                 "--out", str(out), "--no-images", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if "95% CI" in line]
    assert len(lines) == 2 and lines[0].split(": ", 1)[1] == lines[1].split(": ", 1)[1]  # same trials, same rates
    assert "ranking: " in printed and "p = 1 (mcnemar, Holm)" in printed
    assert (out / "0_scripted_hold" / "report.html").is_file() and (out / "1_goto_home" / "summary.json").is_file()
    assert main(["eval", "--task", task_file, "--policy", "scripted:nonexistent", "--trials", "1",
                 "--out", str(out)]) == 2
    assert "unknown scripted policy 'nonexistent'" in capsys.readouterr().err


def test_a_policy_that_fails_to_act_is_a_recorded_outcome_and_the_campaign_goes_on(task_file, tmp_path):
    """An action outside the limits is refused (the driver's validation) and the arm holds; a policy
    that raises holds it too. Each trial ends with a failure stage that says so, the message and
    the time, in the store; the campaign runs every trial. (Holding fails this variant: too_near.)"""
    values = {"block_x": -0.1, "block_y": 0.03}
    failing = [f"scripted:tests.failing_policies:{name}" for name in ("overshoot", "raises", "not_a_number", "short")]
    planned = [Planned(i, TrialSpec.of(policy, task_file, values, seed=1)) for i, policy in enumerate(failing + [HOLD])]
    with TrialStore(tmp_path / "store.sqlite") as store:
        results = run_trials(planned, store, "c", workers=1, progress=False)
        stored = {r.policy: r for r in store.results()}
    assert len(results) == len(stored) == 5
    overshoot, raises, not_a_number, short, hold = (stored[p.spec.policy] for p in planned)
    # A chunk with NaN or of the wrong layout is refused whole by the runtime, which holds.
    assert not_a_number.stage == "policy_error" and "contains NaN or Inf" in not_a_number.detail, not_a_number
    assert short.stage == "policy_error" and "has 6 joints, expected 7" in short.detail, short
    assert overshoot.stage == "invalid_action" and not overshoot.success
    assert "outside the joint limits" in overshoot.detail and "(at 0." in overshoot.detail, overshoot.detail
    assert overshoot.metrics["commands_rejected"] > 0
    assert raises.stage == "policy_error" and "the test policy's network failed" in raises.detail, raises.detail
    assert hold.detail == "" and hold.stage == "too_near"
    # The report counts them in rows of their own, with the first message of each.
    from r2s2r.eval.report import write_report
    page = write_report(tmp_path / "report", results, load_task(task_file).perturbations, {"task": "t"}, images=False)
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["failed_to_act"] == {
        "invalid_action": {"trials": 1, "first": overshoot.detail, "trial": overshoot.id},
        "policy_error": {"trials": 3, "first": raises.detail, "trial": raises.id}}
    text = page.read_text()
    assert "Where the policy failed to act" in text and "the test policy&#x27;s network failed" in text


def test_a_store_from_before_the_detail_column_opens_and_gains_it(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(str(path))
    db.executescript("CREATE TABLE trials (id TEXT PRIMARY KEY, policy TEXT NOT NULL, task TEXT NOT NULL, "
                     "seed INTEGER NOT NULL, control_rate_hz REAL, perturbation TEXT NOT NULL, success INTEGER NOT NULL,"
                     " margin REAL NOT NULL, stage TEXT NOT NULL, sim_time_s REAL NOT NULL, wall_s REAL NOT NULL, "
                     "metrics TEXT NOT NULL, finished REAL NOT NULL);"
                     "INSERT INTO trials VALUES ('t1', 'p', 'k', 1, NULL, '{}', 0, -0.1, 'too_near', 0.2, 0.1, '{}', 0);")
    db.close()
    with TrialStore(path) as store:
        (old,) = store.results()
        assert (old.id, old.stage, old.detail) == ("t1", "too_near", "")


def test_campaign_sizes_beyond_a_million_are_refused_and_search_help_shows_defaults(capsys):
    from r2s2r.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["search", "--task", "franka_block_in_bowl", "--policy", HOLD, "--budget", "2000000"])
    assert exit_.value.code == 2
    assert "argument --budget: 2000000 is not in [1, 1000000]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "--task", "franka_block_in_bowl", "--policy", HOLD, "--trials", "0"])
    assert "argument --trials: 0 is not in [1, 1000000]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: uniform)" in text and "(default: 4)" in text and "(default: scene)" in text


def test_eval_draws_within_a_named_envelope(tmp_path, capsys):
    from r2s2r.cli import main
    task = load_task("franka_block_in_bowl")
    envelope = task.perturbations.envelopes["operating"]
    planned = plan_eval(HOLD, task, 40, seed=3, envelope="operating")
    for name, (low, high) in envelope.items():
        values = [p.spec.values[name] for p in planned]
        assert low <= min(values) and max(values) <= high, name
    # A later block of the same campaign is the tail of the whole plan (a soak plans block by block).
    tail = plan_eval(HOLD, task, 40, seed=3, envelope="operating", first=25)
    assert [(p.index, p.spec) for p in tail] == [(p.index, p.spec) for p in planned[25:]]
    wide = plan_eval(HOLD, task, 40, seed=3)
    assert any(not low <= p.spec.values["block_x"] <= high for p in wide for low, high in [envelope["block_x"]])
    assert main(["eval", "--task", "franka_block_in_bowl", "--policy", HOLD, "--trials", "2", "--envelope", "nope",
                 "--no-progress", "--out", str(tmp_path)]) == 2
    assert "no envelope 'nope'; envelopes: operating" in capsys.readouterr().err


def test_eval_in_the_users_own_scene(tmp_path, capsys):
    """--scene runs a task in another scene file (a user's cell): the task's factors that do not
    apply to it are named in one line (here the table's colour, and the variant pool built for the
    task's own scene), and --skip-missing-factors evaluates without them; the trials carry the
    scene, so workers, the store and replay run them there."""
    import yaml

    from r2s2r.cli import main
    from r2s2r.eval.store import TrialStore
    from r2s2r.eval.tasks import task_in_scene
    scene = yaml.safe_load((REPO / "config" / "tasks" / "franka_block_in_bowl.yaml").read_text())["scene"]
    scene["table"]["rgba"] = [0.5, 0.5, 0.5, 1.0]  # not one of table_colour's choices' nominal (wood)
    scene["objects"][0]["pos"] = [0.5, 0.1, 0.025]  # the block where this cell has it
    mine = tmp_path / "cells" / "my_cell.yaml"
    mine.parent.mkdir()
    mine.write_text(yaml.safe_dump(scene))
    expert = "scripted:franka_block_in_bowl"
    base = ["eval", "--task", "franka_block_in_bowl", "--scene", str(mine), "--policy", expert, "--trials", "2",
            "--no-progress", "--no-images", "--factors", "block_yaw"]
    assert main(base + ["--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "table_colour (" in err and "scene_variant (its pool" in err, err
    assert f"r2s2r variants {mine}" in err and "--skip-missing-factors" in err
    out = tmp_path / "mine"
    assert main(base + ["--skip-missing-factors", "--out", str(out)]) == 0
    with TrialStore(out / "trials.sqlite") as store:
        results = store.results()
    assert len(results) == 2 and {r.task for r in results} == {task_in_scene("franka_block_in_bowl", mine)}
    task = load_task(results[0].task)  # what a worker loads: the user's scene, its block where the cell has it
    assert task.scene().source == str(mine) and task.scene().objects[0].pos[:2] == pytest.approx((0.5, 0.1))
    assert "table_colour" not in task.perturbations.names and "block_yaw" in task.perturbations.names
