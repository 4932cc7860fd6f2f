"""The spot interruption watcher against a local IMDSv2 double; the Keras callback that stops a training on a
notice is in test_callbacks.py."""

import time
import urllib.error
import urllib.request

import pytest

from gpu_job.interruption import ImdsClient, InterruptionWatcher, should_watch
from gpu_runner_testing.imds_double import ImdsDouble


@pytest.fixture
def imds():
    with ImdsDouble() as double:
        yield double


def test_watch_only_on_spot_unless_told() -> None:
    assert should_watch("auto", {"GPU_MARKET": "spot"})
    assert not should_watch("auto", {"GPU_MARKET": "on-demand"})
    assert not should_watch("auto", {})
    assert should_watch(True, {}) and not should_watch(False, {"GPU_MARKET": "spot"})


def test_imds_needs_the_session_token(imds: ImdsDouble) -> None:
    imds.interrupt()
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(imds.url + "/latest/meta-data/spot/instance-action", timeout=2)
    assert denied.value.code == 401
    assert ImdsClient(imds.url).get_json("/latest/meta-data/spot/instance-action") == {
        "action": "terminate",
        "time": "2026-11-30T12:00:00Z",
    }
    assert ImdsClient(imds.url).get_json("/latest/meta-data/events/recommendations/rebalance") is None


def test_watcher_sees_rebalance_then_the_notice_and_stops_polling(imds: ImdsDouble) -> None:
    lines: list[str] = []
    with InterruptionWatcher(ImdsClient(imds.url), interval=0.05, log=lines.append) as watcher:
        time.sleep(0.3)
        assert watcher.rebalance is None and watcher.instance_action is None
        imds.recommend_rebalance()
        deadline = time.monotonic() + 10
        while watcher.rebalance is None and time.monotonic() < deadline:
            time.sleep(0.05)
        imds.interrupt()
        while watcher.instance_action is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.rebalance is not None and watcher.instance_action is not None
        polls = len(imds.requests)
        time.sleep(0.3)
        assert len(imds.requests) == polls, "the watcher kept polling after the notice"
    assert watcher.instance_action.detail == {"action": "terminate", "time": "2026-11-30T12:00:00Z"}
    # One token for the whole watch (it lives six hours), not one per poll.
    assert sum(1 for method, _, _ in imds.requests if method == "PUT") == 1
    assert any("rebalance" in line for line in lines) and any("interruption notice" in line for line in lines)


def test_watcher_survives_imds_errors(imds: ImdsDouble) -> None:
    imds.down = True
    lines: list[str] = []
    with InterruptionWatcher(ImdsClient(imds.url), interval=0.05, log=lines.append) as watcher:
        time.sleep(0.3)
        assert watcher.errors >= 2
        imds.down = False
        imds.interrupt()
        deadline = time.monotonic() + 10
        while watcher.instance_action is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert watcher.instance_action is not None
    assert sum("WARNING" in line for line in lines) == 1  # said once, not every poll


def test_each_simulated_instance_sees_only_its_own_notice() -> None:
    """The sweep story's legs share one host: the double binds each token to the process that asked for it (its
    TRIAL, as sweep-trial.yml's train step sets it), so a notice for one leg reaches only that leg."""
    import os
    import subprocess
    import sys

    from gpu_runner_testing.peer_env import peer_variable

    probe = (
        "import json; from gpu_job.interruption import ImdsClient, INSTANCE_ACTION; "
        "print(json.dumps(ImdsClient().get_json(INSTANCE_ACTION)))"
    )
    with ImdsDouble(instance_of=peer_variable("TRIAL")) as imds:
        imds.interrupt(instance="1")
        seen = {}
        for trial in ("0", "1"):
            env = {**os.environ, "TRIAL": trial, "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}
            done = subprocess.run(
                [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True
            )
            seen[trial] = done.stdout.strip()
        assert sorted(set(imds.tokens.values())) == ["0", "1"]
    assert seen == {"0": "null", "1": '{"action": "terminate", "time": "2026-11-30T12:00:00Z"}'}
