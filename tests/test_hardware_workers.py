"""The backends' helpers: LatestWorker (blocking SDK calls off the control loop) and SilenceClock
(a lost link told from a stalled host)."""

import threading

import pytest

from r2s2r.hardware._link import SilenceClock
from r2s2r.hardware._worker import LatestWorker


def test_only_the_newest_request_runs_after_a_slow_one():
    started, release, ran = threading.Event(), threading.Event(), []

    def action(request):
        ran.append(request)
        if request == 1:
            started.set()
            release.wait(5)

    worker = LatestWorker("test-latest", action)
    worker.submit(1)
    assert started.wait(5)
    for request in (2, 3, 4):  # arrive while 1 still runs: only the last one matters
        worker.submit(request)
    release.set()
    assert worker.flush(5)
    assert ran == [1, 4] and worker.calls == 2
    worker.close()
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit(5)
    worker.close()  # twice is fine


def test_an_exception_is_handed_over_once_and_the_worker_goes_on():
    ran = []

    def action(request):
        if request == "bad":
            raise ValueError("the SDK refused")
        ran.append(request)

    worker = LatestWorker("test-errors", action)
    worker.submit("bad")
    assert worker.flush(5)
    error = worker.take_error()
    assert isinstance(error, ValueError) and str(error) == "the SDK refused"
    assert worker.take_error() is None
    worker.submit("good")
    assert worker.flush(5) and ran == ["good"]
    worker.close()


def test_idle_calls_keep_coming_while_requests_keep_coming():
    polls, requests = threading.Semaphore(0), []
    worker = LatestWorker("test-idle", requests.append, idle=polls.release, idle_period_s=0.01)
    stop = threading.Event()

    def flood():
        n = 0
        while not stop.is_set():
            worker.submit(n)
            n += 1

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        assert all(polls.acquire(timeout=5) for _ in range(5))  # polled although never idle
    finally:
        stop.set()
        flooder.join()
        worker.close()
    assert requests


def test_silence_counts_while_we_watch():
    clock = SilenceClock(0.05, now=0.0)
    for t in (0.01, 0.02, 0.03, 0.04):  # looking every 10 ms, nothing heard
        assert clock.silence(t) == pytest.approx(t)
    assert clock.silence(0.06) > 0.05  # lost
    clock.heard(0.06)
    assert clock.silence(0.07) == pytest.approx(0.01)


def test_a_stall_of_our_own_gives_the_robot_one_more_timeout_and_only_one():
    clock = SilenceClock(0.05, now=0.0)
    clock.silence(0.01)
    assert clock.silence(0.30) == 0.0  # we did not run for 290 ms: that proves nothing
    assert clock.silence(0.34) == pytest.approx(0.04)
    assert clock.silence(0.60) > 0.05  # a second stall without a word from the robot: lost
    clock.heard(0.60)
    assert clock.silence(0.90) == 0.0  # heard again: the next stall is forgiven once more
