"""Which multi-worker cluster a process belongs to (gpu_job.distributed): an explicit TF_CONFIG, or AWS Batch's
multi-node variables and the rendezvous on the main node, and its refusals of bad input. The project's tests
train the digits on two real worker processes with it."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import threading
import time

import pytest

from gpu_job import distributed, rendezvous
from gpu_job.distributed import Cluster, cluster_from_env, parse_tf_config, task_rank
from gpu_job.errors import DistributedError
from gpu_runner_testing.multi_node import SECRET, batch_env, free_ports, tf_config


# ---------------------------------------------------------------------- TF_CONFIG given
def test_an_explicit_tf_config_is_the_cluster() -> None:
    workers = ["10.0.0.5:2222", "10.0.0.6:2222"]
    chief = cluster_from_env({"TF_CONFIG": tf_config(workers, 0)})
    other = cluster_from_env({"TF_CONFIG": tf_config(workers, 1)})
    assert chief == Cluster(tuple(workers), 0) and chief.is_chief
    assert other == Cluster(tuple(workers), 1) and not other.is_chief
    # What runtime.configure hands TensorFlow says the same.
    assert json.loads(other.tf_config()) == json.loads(tf_config(workers, 1))


def test_no_cluster_means_the_single_worker_path() -> None:
    assert cluster_from_env({}) is None
    assert cluster_from_env({"TF_CONFIG": tf_config(["127.0.0.1:2222"], 0)}) is None
    # A one-node Batch job: nothing to exchange, no rendezvous.
    assert cluster_from_env(batch_env(0, 1, 0)) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", r"TF_CONFIG is not JSON .*set it to"),
        ('{"cluster": {"worker": ["a:1"]}}', r'TF_CONFIG needs both "cluster" and "task"'),
        (
            tf_config(["a:1", "b:1"], 0).replace('"worker": [', '"ps": ["c:1"], "worker": ['),
            r"task type\(s\) ps: .*list every node under cluster.worker",
        ),
        ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}', r"non-empty list"),
        (tf_config(["a:1", "b"], 0), r"TF_CONFIG.cluster.worker: 'b' is not \"host:port\""),
        (tf_config(["a:1", "b:70000"], 0), r"'b:70000' is not \"host:port\""),
        (tf_config(["a:1", "a:1"], 0), r"lists an address twice"),
        (tf_config(["a:1", "b:1"], 2), r"task.index is 2; it must be .* 0 to 1"),
        (tf_config(["a:1", "b:1"], 0).replace('"index": 0', '"index": "0"'), r"task.index is '0'"),
        (
            tf_config(["a:1", "b:1"], 0).replace('"type": "worker"', '"type": "chief"'),
            r"task.type is 'chief'",
        ),
    ],
)
def test_a_bad_tf_config_is_refused_with_the_fix(value: str, message: str) -> None:
    with pytest.raises(DistributedError, match=message):
        parse_tf_config(value)


def test_a_tf_config_that_disagrees_with_batch_is_refused() -> None:
    env = {**batch_env(0, 3, 0), "TF_CONFIG": tf_config(["a:1", "b:1"], 0)}
    with pytest.raises(
        DistributedError, match=r"lists 2 worker\(s\) but AWS_BATCH_JOB_NUM_NODES is 3: unset"
    ):
        cluster_from_env(env)


# ---------------------------------------------------------------------- AWS Batch's variables
@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"AWS_BATCH_JOB_NODE_INDEX": "1"},
            r"AWS_BATCH_JOB_NUM_NODES, AWS_BATCH_JOB_MAIN_NODE_INDEX not set, though AWS_BATCH_JOB_NODE_INDEX is",
        ),
        (
            batch_env(0, 2, 0, AWS_BATCH_JOB_NUM_NODES="two"),
            r"AWS_BATCH_JOB_NUM_NODES is 'two'; .*whole number",
        ),
        (batch_env(0, 2, 0, AWS_BATCH_JOB_NUM_NODES="0"), r"AWS_BATCH_JOB_NUM_NODES is '0'; .*at least 1"),
        (batch_env(2, 2, 0), r"AWS_BATCH_JOB_NODE_INDEX is '2'; it must be a whole number from 0 to 1"),
        (batch_env(0, 2, 5), r"AWS_BATCH_JOB_MAIN_NODE_INDEX is '5'"),
        (
            {k: v for k, v in batch_env(1, 2, 0).items() if "ADDRESS" not in k},
            r"AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS is not set on child node 1",
        ),
        (
            batch_env(1, 2, 0, AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS="main.internal"),
            r"'main.internal', not an IPv4 address",
        ),
        (batch_env(0, 2, 0, MNP_WORKER_PORT="0"), r"MNP_WORKER_PORT is '0'; .*from 1 to 65535"),
        (
            batch_env(0, 2, 0, MNP_WORKER_PORT="2223"),
            r"MNP_WORKER_PORT and MNP_RENDEZVOUS_PORT are both 2223",
        ),
        (batch_env(0, 2, 0, MNP_RENDEZVOUS_TIMEOUT_SECONDS="-1"), r"MNP_RENDEZVOUS_TIMEOUT_SECONDS is '-1'"),
    ],
)
def test_bad_batch_variables_are_refused_before_any_connection(env: dict[str, str], message: str) -> None:
    with pytest.raises(DistributedError, match=message):
        cluster_from_env(env)


def test_the_main_node_is_the_chief_and_the_children_follow_in_node_order() -> None:
    # Batch lets the job definition name any node the main one (AWS_BATCH_JOB_MAIN_NODE_INDEX).
    assert [task_rank(node, 0) for node in range(4)] == [0, 1, 2, 3]
    assert [task_rank(node, 2) for node in range(4)] == [1, 2, 0, 3]
    assert sorted(task_rank(node, 3) for node in range(4)) == [0, 1, 2, 3]


def run_nodes(envs: list[dict[str, str]]) -> list[Cluster | BaseException]:
    """cluster_from_env on each 'node' at once (threads): what every node of the job ends up with."""
    results: list[Cluster | BaseException] = [RuntimeError("did not finish")] * len(envs)

    def node(index: int) -> None:
        try:
            results[index] = cluster_from_env(envs[index])  # type: ignore[assignment]
        except BaseException as error:  # handed to the test, which asserts on it
            results[index] = error

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(len(envs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_three_nodes_agree_on_one_cluster_through_the_main_node() -> None:
    rendezvous_port, *worker_ports = free_ports(4)
    main = 1  # not node 0: the main node's rank is still 0
    envs = [
        batch_env(
            node,
            3,
            main,
            MNP_RENDEZVOUS_PORT=str(rendezvous_port),
            MNP_WORKER_PORT=str(worker_ports[node]),
            MNP_RENDEZVOUS_BIND="127.0.0.1",
            MNP_RENDEZVOUS_TIMEOUT_SECONDS="20",
        )
        for node in range(3)
    ]
    clusters = run_nodes(envs)
    assert all(isinstance(c, Cluster) for c in clusters), clusters
    # Rank order: the main node (node 1), then node 0, then node 2; each address is the one its node listens on.
    expected = tuple(f"127.0.0.1:{worker_ports[node]}" for node in (1, 0, 2))
    assert [c.workers for c in clusters] == [expected] * 3  # type: ignore[union-attr]
    assert [c.task_index for c in clusters] == [1, 0, 2]  # type: ignore[union-attr]
    assert [c.is_chief for c in clusters] == [False, True, False]  # type: ignore[union-attr]


def test_a_node_that_counts_other_nodes_fails_every_node() -> None:
    rendezvous_port, main_port, child_port = free_ports(3)
    common = {"MNP_RENDEZVOUS_PORT": str(rendezvous_port), "MNP_RENDEZVOUS_TIMEOUT_SECONDS": "10"}
    envs = [
        batch_env(0, 2, 0, MNP_WORKER_PORT=str(main_port), MNP_RENDEZVOUS_BIND="127.0.0.1", **common),
        # This child believes in a three-node job: its node index is valid there, the count is not.
        batch_env(2, 3, 0, MNP_WORKER_PORT=str(child_port), **common),
    ]
    main, child = run_nodes(envs)
    assert isinstance(main, DistributedError), main
    assert "it counts 3 node(s), this node 2: every node must see the same AWS_BATCH_JOB_NUM_NODES" in str(
        main
    )
    assert isinstance(child, DistributedError), child
    assert "the main node 127.0.0.1 ended the rendezvous" in str(child) and "counts 3 node(s)" in str(child)


def test_a_rank_that_checks_in_twice_fails_every_node() -> None:
    rendezvous_port, *worker_ports = free_ports(4)
    common = {"MNP_RENDEZVOUS_PORT": str(rendezvous_port), "MNP_RENDEZVOUS_TIMEOUT_SECONDS": "10"}
    envs = [
        batch_env(0, 3, 0, MNP_WORKER_PORT=str(worker_ports[0]), MNP_RENDEZVOUS_BIND="127.0.0.1", **common),
        # Two nodes both told they are node 1 (and nobody node 2): the cluster would miss a worker.
        batch_env(1, 3, 0, MNP_WORKER_PORT=str(worker_ports[1]), **common),
        batch_env(1, 3, 0, MNP_WORKER_PORT=str(worker_ports[2]), **common),
    ]
    main, *children = run_nodes(envs)
    assert isinstance(main, DistributedError), main
    assert "rank 1 checked in twice" in str(main) and "its own AWS_BATCH_JOB_NODE_INDEX" in str(main)
    # Both hear the main node's reason: the second on arrival, the first when the main node gives up.
    reason = "ended the rendezvous: rendezvous: rank 1 checked in twice"
    assert all(reason in str(child) for child in children), children


def test_a_child_that_never_checks_in_times_out_on_the_main_node_with_the_fix() -> None:
    rendezvous_port, worker_port = free_ports(2)
    env = batch_env(
        0,
        2,
        0,
        MNP_RENDEZVOUS_PORT=str(rendezvous_port),
        MNP_WORKER_PORT=str(worker_port),
        MNP_RENDEZVOUS_BIND="127.0.0.1",
        MNP_RENDEZVOUS_TIMEOUT_SECONDS="0.3",
    )
    with pytest.raises(
        DistributedError, match=r"worker rank\(s\) \[1\] of 2 never checked in .*security group"
    ):
        cluster_from_env(env)


def test_a_child_that_cannot_reach_the_main_node_says_where_it_looked() -> None:
    (rendezvous_port,) = free_ports(1)  # nobody listens there
    env = batch_env(1, 2, 0, MNP_RENDEZVOUS_PORT=str(rendezvous_port), MNP_RENDEZVOUS_TIMEOUT_SECONDS="0.3")
    with pytest.raises(
        DistributedError, match=rf"could not reach the main node at 127.0.0.1:{rendezvous_port}"
    ):
        cluster_from_env(env)


def connect_when_listening(port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            assert time.monotonic() < deadline, "the rendezvous never listened"
            time.sleep(0.05)


def test_a_check_in_that_is_not_this_protocol_ends_the_rendezvous() -> None:
    (rendezvous_port,) = free_ports(1)
    outcome: list[BaseException] = []

    def serve() -> None:
        try:
            rendezvous.serve("127.0.0.1", rendezvous_port, 2, 2222, 10, SECRET)
        except DistributedError as error:
            outcome.append(error)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with connect_when_listening(rendezvous_port) as stranger:
        stranger.sendall(b'{"rank": "1"}\n')
    thread.join(timeout=10)
    assert outcome and "127.0.0.1 sent no valid check-in" in str(outcome[0]), outcome
    assert "only this job's nodes may reach the rendezvous port" in str(outcome[0])


def _forged_check_in(stranger: socket.socket, proof_key: bytes | None) -> bytes:
    """A check-in for rank 1 of a two-node job, as another job's code would send it: well-formed, with a worker port
    of its own, and a proof made with `proof_key` (another job's secret) or none at all. Returns what the main node
    answered."""
    message: dict[str, object] = {"rank": 1, "num_nodes": 2, "worker_port": 4444}
    stranger.settimeout(2)
    if proof_key is not None:
        # Play the protocol: read the main node's challenge and sign with the wrong secret.
        challenge = json.loads(stranger.makefile("rb").readline())["challenge"]
        payload = json.dumps({**message, "challenge": challenge}, sort_keys=True, separators=(",", ":"))
        message["proof"] = hmac.new(proof_key, b"check-in\n" + payload.encode(), hashlib.sha256).hexdigest()
    stranger.sendall(json.dumps(message).encode() + b"\n")
    answer = b""
    with contextlib.suppress(OSError):
        while chunk := stranger.recv(4096):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    "proof_key", [None, b"another job's secret"], ids=["no proof", "another job's secret"]
)
def test_a_check_in_without_this_jobs_secret_is_refused_and_ends_the_rendezvous(
    proof_key: bytes | None,
) -> None:
    """Another job's code that reaches the rendezvous port (the same security group) checks in as rank 1 before the
    real child: without this job's secret its check-in is refused, the main node fails with the reason instead of
    training with a stranger in its cluster, and the stranger learns no worker list."""
    rendezvous_port, worker_port = free_ports(2)
    env = batch_env(0, 2, 0, MNP_RENDEZVOUS_PORT=str(rendezvous_port), MNP_WORKER_PORT=str(worker_port),
                    MNP_RENDEZVOUS_BIND="127.0.0.1", MNP_RENDEZVOUS_TIMEOUT_SECONDS="10")  # fmt: skip
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(_run(env)), daemon=True)
    thread.start()
    with connect_when_listening(rendezvous_port) as stranger:
        answer = _forged_check_in(stranger, proof_key)
    thread.join(timeout=15)
    (main,) = outcome
    assert isinstance(main, DistributedError), f"the forged check-in was accepted: {main}"
    assert "does not prove this job's MNP_RENDEZVOUS_SECRET" in str(main), main
    assert b"4444" not in answer and b"workers" not in answer, answer


def _run(env: dict[str, str]) -> object:
    try:
        return cluster_from_env(env)
    except DistributedError as error:
        return error


def test_a_child_with_another_jobs_secret_fails_every_node() -> None:
    """A real node of another job (its own secret) reaching this job's main node: both sides refuse."""
    rendezvous_port, main_port, child_port = free_ports(3)
    common = {"MNP_RENDEZVOUS_PORT": str(rendezvous_port), "MNP_RENDEZVOUS_TIMEOUT_SECONDS": "10"}
    envs = [
        batch_env(0, 2, 0, MNP_WORKER_PORT=str(main_port), MNP_RENDEZVOUS_BIND="127.0.0.1", **common),
        batch_env(1, 2, 0, MNP_WORKER_PORT=str(child_port), **{**common, "MNP_RENDEZVOUS_SECRET": "o" * 43}),
    ]
    main, child = run_nodes(envs)
    assert isinstance(main, DistributedError) and "does not prove this job's" in str(main), main
    assert isinstance(child, DistributedError) and "ended the rendezvous" in str(child), child


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (None, r"MNP_RENDEZVOUS_SECRET is not set: .*gpu-runner batch submit --multinode"),
        ("short", r"MNP_RENDEZVOUS_SECRET is 5 characters; .*at least 32"),
    ],
    ids=["missing", "too short"],
)
def test_a_multi_node_job_without_a_secret_is_refused_before_any_connection(
    secret: str | None, message: str
) -> None:
    env = batch_env(1, 2, 0, MNP_RENDEZVOUS_TIMEOUT_SECONDS="0.3")
    if secret is None:
        del env["MNP_RENDEZVOUS_SECRET"]
    else:
        env["MNP_RENDEZVOUS_SECRET"] = secret
    with pytest.raises(DistributedError, match=message):
        cluster_from_env(env)


def test_the_secret_gpu_runner_draws_is_the_one_the_nodes_read() -> None:
    """`gpu-runner batch submit --multinode` sets the variable the nodes read, long enough for them to accept."""
    import secrets

    from gpu_runner.batch import batch_jobs

    assert batch_jobs.RENDEZVOUS_SECRET == distributed.RENDEZVOUS_SECRET
    assert len(secrets.token_urlsafe(batch_jobs.RENDEZVOUS_SECRET_BYTES)) >= distributed.MIN_SECRET_LENGTH
