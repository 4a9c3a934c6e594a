"""A failure search end to end on the synthetic task (tests/eval_helpers.py): the same rows for
any number of workers, resumption without rerunning, the atlas of the known regions, the
report, and `r2s2r replay` of a cluster's representative."""

import json
import re
from pathlib import Path

import cv2
import pytest

from r2s2r.cli import main
from r2s2r.data.mcap_io import read_bag, topics
from r2s2r.eval.report import write_report
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.search.campaign import run_search
from r2s2r.search.refine import pair_with_successes
from tests.eval_helpers import HOLD, NEAR_X, NOMINAL_XY, synthetic_task

CEM = {"warmup": 10}  # adaptive after the first batch, so a short search exercises it


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    return str(synthetic_task(tmp_path_factory.mktemp("synthetic")))


@pytest.fixture(scope="module")
def searched(task_file, tmp_path_factory):
    """A CEM search of 40 trials on one worker, its store kept open for the module's tests."""
    folder = tmp_path_factory.mktemp("search")
    store = TrialStore(folder / "trials.sqlite")
    task = load_task(task_file)
    search = run_search(task, HOLD, budget=40, sampler="cem", batch=10, workers=1, store=store, refine_steps=3,
                        progress=False, task_ref=task_file, sampler_options=CEM)
    yield task, store, search, folder
    store.close()


def deterministic(results):
    return [r.deterministic() for r in results]


def test_the_search_gives_the_same_rows_on_two_workers(searched, task_file, tmp_path):
    task, _, one, _ = searched
    with TrialStore(tmp_path / "two.sqlite") as store:
        two = run_search(task, HOLD, budget=40, sampler="cem", batch=10, workers=2, store=store, refine_steps=3,
                         progress=False, task_ref=task_file, sampler_options=CEM)
    assert deterministic(one.results) == deterministic(two.results)
    assert deterministic(one.refined) == deterministic(two.refined)
    assert [c.representative for c in one.atlas.clusters] == [c.representative for c in two.atlas.clusters]


def test_a_resumed_search_proposes_the_same_trials_and_reruns_none(searched, task_file, tmp_path):
    task, _, full, _ = searched
    with TrialStore(tmp_path / "resumed.sqlite") as store:
        # As if the campaign had been killed after two of its four batches.
        run_search(task, HOLD, budget=20, sampler="cem", batch=10, store=store, refine_steps=0, progress=False,
                   task_ref=task_file, sampler_options=CEM)
        first = {r.id: r.wall_s for r in store.results()}
        resumed = run_search(task, HOLD, budget=40, sampler="cem", batch=10, store=store, refine_steps=3,
                             progress=False, task_ref=task_file, sampler_options=CEM)
        assert deterministic(resumed.results) == deterministic(full.results)
        assert {r.id: r.wall_s for r in resumed.results[:20]} == first  # stored, not rerun
        assert store.count() == 40 + len(resumed.refined)


def test_a_search_within_an_envelope_states_its_clusters_within_the_envelope(task_file, tmp_path):
    task = load_task(task_file)
    with TrialStore(tmp_path / "inner.sqlite") as store:
        search = run_search(task, HOLD, budget=30, sampler="uniform", batch=10, store=store, refine_steps=0,
                            progress=False, task_ref=task_file, envelope="inner")
    assert search.space.factor("block_x").low == -0.12 and search.space.factor("light").high == 1.2
    near = max((c for c in search.atlas.clusters if c.stage == "too_near"), key=lambda c: c.size)
    (x,) = [c for c in near.conditions if c.factor == "block_x"]
    # The region reaches the envelope's edge, not the whole space's (-0.15), where no trial went.
    assert x.low == pytest.approx(-0.12) and x.high == pytest.approx(NEAR_X - NOMINAL_XY[0], abs=0.03)
    assert min(r.perturbation["block_x"] for r in search.results) >= -0.12


def test_the_atlas_finds_the_known_failure_regions(searched):
    task, _, search, _ = searched
    stages = {r.stage for r in search.results}
    assert {"success", "too_near"} <= stages
    near = max((c for c in search.atlas.clusters if c.stage == "too_near"), key=lambda c: c.size)
    bounds = {c.factor: (c.low, c.high) for c in near.conditions}
    assert set(bounds) == {"block_x"}, near.describe()  # colour and light never matter
    # The region ends in the middle of the gap between the nearest failure and success that the
    # sampler drew, and the true boundary lies in that gap (refinement, below, narrows it).
    last_failure = max(r.perturbation["block_x"] for r in search.results if r.stage == "too_near")
    first_success = min(r.perturbation["block_x"] for r in search.results
                        if r.success and r.perturbation["block_x"] > last_failure)
    assert last_failure < NEAR_X - NOMINAL_XY[0] < first_success
    assert bounds["block_x"][1] == pytest.approx((last_failure + first_success) / 2)
    # Refinement brought each cluster's boundary in: 3 bisections cut each pair to an eighth of
    # where it started, and its near-miss is no farther from failing than the success it began at.
    assert search.boundaries and all(b.steps == 3 for b in search.boundaries)
    started = pair_with_successes(search.atlas, search.results, search.units)
    assert [b.cluster for b in started] == [b.cluster for b in search.boundaries]
    for b, start in zip(search.boundaries, started):
        assert b.success_margin > 0 >= b.failure_margin
        assert b.width == pytest.approx(start.width / 8)
        assert b.success_margin <= start.success_margin
    assert any(b.success_margin < start.success_margin for b, start in zip(search.boundaries, started))


def test_the_report_has_the_plots_the_atlas_and_summary_json(searched, tmp_path):
    task, store, search, _ = searched
    meta = {"task": "synthetic_hazards", "policy": HOLD, "sampler": "cem", "campaign": search.campaign}
    page = write_report(tmp_path, search.results, task.perturbations, meta, search.atlas, search.boundaries,
                        store_path=store.path, refined=search.refined)
    text = page.read_text()
    for heading in ("Success against each factor", "Outcomes over the object", "Failure atlas",
                    "Failure boundaries and near-misses"):
        assert heading in text
    assert text.count("data:image/png;base64,") == 2 + 2 * len(search.atlas.clusters)  # plots, start + failure
    assert f"r2s2r replay {search.atlas.clusters[0].representative} --store {store.path}" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["trials"] == 40 and summary["successes"] + summary["failures"] == 40
    assert summary["failures"] == sum(not r.success for r in search.results)
    assert summary["sampler"] == "cem" and summary["policy"] == HOLD and summary["task"] == "synthetic_hazards"
    assert len(summary["clusters"]) == len(search.atlas.clusters) and summary["boundaries"]


def test_replay_reruns_a_stored_trial_bit_for_bit_and_records_video_and_bag(searched, tmp_path, capsys):
    _, store, search, _ = searched
    trial = search.atlas.clusters[0].representative
    assert main(["replay", trial[:10], "--store", str(store.path)]) == 0
    printed = capsys.readouterr().out
    assert "reproduced bit for bit" in printed and f"margin {store.get(trial).margin!r}" in printed
    replays = Path(store.path).parent / "replays"  # beside the campaign's store, as the docs say
    video = cv2.VideoCapture(str(replays / f"{trial}.mp4"))
    assert video.get(cv2.CAP_PROP_FRAME_COUNT) == 5  # the start and 4 ticks of 0.05 s
    assert (video.get(cv2.CAP_PROP_FRAME_WIDTH), video.get(cv2.CAP_PROP_FRAME_HEIGHT)) == (320, 240)
    bag = replays / f"{trial}.mcap"
    assert set(topics(bag)) == {"/clock", "/joint_states", "/arm_streaming_controller/commands",
                                "/gripper_controller/commands", "/cameras/scene/image_raw", "/twin/object_poses"}
    states = list(read_bag(bag, ["/joint_states"]))
    assert len(states) == 5 and states[-1].stamp == pytest.approx(0.2)
    assert len(states[0].msg.position) == 9
    assert main(["replay", "0000", "--store", str(store.path)]) == 2
    assert "no trial with id '0000'" in capsys.readouterr().err


def test_the_search_command_prints_clusters_and_the_report(task_file, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["search", "--task", task_file, "--policy", HOLD, "--budget", "20", "--sampler", "sobol",
                 "--batch", "10", "--out", str(out), "--no-images", "--no-progress", "--refine-steps", "1"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"sobol: 20 trials, \d+ failures", printed)
    assert f"report: {out / 'report.html'}" in printed and (out / "summary.json").is_file()
    assert main(["search", "--task", task_file, "--policy", HOLD, "--budget", "5", "--sampler", "sobol",
                 "--factors", "block_z", "--out", str(out)]) == 2
    assert "no factor 'block_z'" in capsys.readouterr().err


def test_the_search_command_passes_sampler_options_and_names_a_wrong_one(task_file, tmp_path, capsys):
    out = tmp_path / "cli"
    base = ["search", "--task", task_file, "--policy", HOLD, "--budget", "20", "--sampler", "cem", "--batch", "10",
            "--no-images", "--no-progress", "--refine-steps", "0"]
    assert main(base + ["--out", str(out), "--sampler-option", "warmup=10", "--sampler-option", "explore_beta=1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sampler_options"] == {"warmup": 10, "explore_beta": 1}
    with TrialStore(out / "trials.sqlite") as store:
        config = store.campaign_config(store.campaigns()[0])
    assert config["sampler_options"] == {"warmup": 10, "explore_beta": 1}
    capsys.readouterr()
    for option, message in (("explore_bta=1", "sampler 'cem' has no option 'explore_bta'; its options: "),
                            ("explore_beta", "--sampler-option 'explore_beta'; expected KEY=VALUE"),
                            ("explore_beta=wide", "option explore_beta = 'wide'; expected float"),
                            ("warmup=7.5", "option warmup = 7.5; expected int"),
                            ("explore_beta=0", "explore_beta 0.0; expected a Beta shape above 0")):
        assert main(base + ["--out", str(tmp_path / "bad"), "--sampler-option", option]) == 2, option
        assert message in capsys.readouterr().err, option
