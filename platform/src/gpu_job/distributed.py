"""Which multi-worker cluster this process belongs to: an explicit TF_CONFIG, or the environment AWS Batch gives
the nodes of a multi-node parallel (MNP) job, turned into the TF_CONFIG that MultiWorkerMirroredStrategy reads.

TensorFlow-free (json, ipaddress and the rendezvous' sockets): the project's runtime.configure writes TF_CONFIG and
builds the strategy from the Cluster this module returns. None = no cluster: the single-worker path, unchanged.

What Batch sets on every node of an MNP job (AWS Batch User Guide, "Multi-node parallel jobs" > "Environment
variables", https://docs.aws.amazon.com/batch/latest/userguide/mnp-env-vars.html, read 2026-12-04):
AWS_BATCH_JOB_NODE_INDEX (0-based, unique per node), AWS_BATCH_JOB_NUM_NODES (the nodes requested),
AWS_BATCH_JOB_MAIN_NODE_INDEX, and on child nodes only AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS ("This
variable isn't present on the main node"). No node is told the other children's addresses, and TF_CONFIG needs
every worker's: the main node is the rendezvous (rendezvous.py) where each child checks in and learns the list.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from . import rendezvous
from .errors import DistributedError

TF_CONFIG = "TF_CONFIG"
# Set by AWS Batch on MNP nodes (the page cited above). The AWS_BATCH_ prefix is reserved for Batch ("you can't use
# this prefix for your own variables", https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html), so
# this project's own settings below are MNP_*.
NODE_INDEX = "AWS_BATCH_JOB_NODE_INDEX"
NUM_NODES = "AWS_BATCH_JOB_NUM_NODES"
MAIN_NODE_INDEX = "AWS_BATCH_JOB_MAIN_NODE_INDEX"
MAIN_NODE_ADDRESS = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"
# This project's settings for an MNP job (the job definition's environment; defaults below). Both ports must be
# open between the job's nodes (docs/training.md#multi-worker-training-aws-batch).
WORKER_PORT = "MNP_WORKER_PORT"  # this node's TensorFlow gRPC server
RENDEZVOUS_PORT = "MNP_RENDEZVOUS_PORT"  # the main node's check-in port
RENDEZVOUS_TIMEOUT = "MNP_RENDEZVOUS_TIMEOUT_SECONDS"  # how long the nodes wait for each other
RENDEZVOUS_BIND = "MNP_RENDEZVOUS_BIND"  # the main node's listening address (127.0.0.1 in the tests)
# The job's own secret for the rendezvous (rendezvous.py: every check-in and answer is signed with it). Where it
# comes from: `gpu-runner batch submit --multinode` draws 256 random bits per job and puts them in that job's
# SubmitJob node overrides, so every node of the job, and only that job, gets them in its environment. Who else
# can read them: principals allowed batch:DescribeJobs on the job (the submit role, i.e. the default branch's
# batch.yml; the account's administrators). Not the code of another job (the job role has no batch: action), not
# a branch writer (the gpu-runner roles have none either), not the Actions log (nothing prints it). The other
# places considered hold it worse: an SSM parameter or S3 object per job would be readable by every job, since
# all jobs share the job role; the job definition is shared by every job.
RENDEZVOUS_SECRET = "MNP_RENDEZVOUS_SECRET"
# 32 characters at least: gpu-runner's 256 bits are 43 url-safe characters; a guessable value is refused.
MIN_SECRET_LENGTH = 32
# 2222 is the port TensorFlow's own distributed examples give a worker; the rendezvous takes the next one.
DEFAULT_WORKER_PORT = 2222
DEFAULT_RENDEZVOUS_PORT = 2223
# Batch starts the children only once the main node is up, and each pulls its image first: minutes, not seconds.
DEFAULT_RENDEZVOUS_TIMEOUT = 600.0


@dataclass(frozen=True)
class Cluster:
    """The workers of one multi-worker training (host:port each, in TensorFlow's task order) and this process'
    place among them. Worker 0 is the chief: TensorFlow's convention when the cluster has no "chief" task."""

    workers: tuple[str, ...]
    task_index: int

    @property
    def num_workers(self) -> int:
        return len(self.workers)

    @property
    def is_chief(self) -> bool:
        return self.task_index == 0

    def tf_config(self) -> str:
        """TF_CONFIG as MultiWorkerMirroredStrategy reads it: cluster.worker and this task."""
        return json.dumps(
            {"cluster": {"worker": list(self.workers)}, "task": {"type": "worker", "index": self.task_index}}
        )

    def describe(self) -> str:
        role = "the chief" if self.is_chief else f"not the chief (the chief is {self.workers[0]})"
        return f"multi-worker training: worker {self.task_index} of {self.num_workers}, {role}"


@dataclass(frozen=True)
class BatchNode:
    """What Batch told this node about its MNP job."""

    node_index: int
    num_nodes: int
    main_index: int
    # None on the main node: Batch sets the main node's address on the children only.
    main_address: str | None

    @property
    def is_main(self) -> bool:
        return self.node_index == self.main_index


def cluster_from_env(env: Mapping[str, str] | None = None) -> Cluster | None:
    """The cluster this process trains in, or None for single-worker training (neither TF_CONFIG nor an MNP job
    of more than one node). An explicit TF_CONFIG wins over Batch's variables (a launcher that already wrote it
    knows best), but both must agree on the number of workers."""
    env = os.environ if env is None else env
    node = batch_node(env)
    if env.get(TF_CONFIG, "").strip():
        cluster = parse_tf_config(env[TF_CONFIG])
        if node is not None and node.num_nodes != cluster.num_workers:
            raise DistributedError(
                f"{TF_CONFIG} lists {cluster.num_workers} worker(s) but {NUM_NODES} is {node.num_nodes}: unset "
                f"{TF_CONFIG} to let the nodes build it from Batch's variables, or list one worker per node"
            )
        return cluster if cluster.num_workers > 1 else None
    if node is None or node.num_nodes == 1:
        return None
    return cluster_from_batch(node, env)


def parse_tf_config(text: str) -> Cluster:
    """An explicit TF_CONFIG: a "worker" list of host:port and this task (type "worker", index in range).

    Only MultiWorkerMirroredStrategy's shape is accepted: "ps" belongs to ParameterServerStrategy and a
    separate "chief" or "evaluator" task is not a worker this training runs as."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise DistributedError(
            f"{TF_CONFIG} is not JSON ({error.msg} at character {error.pos}): set it to "
            '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": N}}'
        ) from None
    cluster = raw.get("cluster") if isinstance(raw, dict) else None
    task = raw.get("task") if isinstance(raw, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise DistributedError(f'{TF_CONFIG} needs both "cluster" and "task" objects; got {text[:200]}')
    others = sorted(set(cluster) - {"worker"})
    if others:
        raise DistributedError(
            f"{TF_CONFIG}.cluster has task type(s) {', '.join(others)}: MultiWorkerMirroredStrategy training here "
            'runs as "worker" tasks only (worker 0 is the chief); list every node under cluster.worker'
        )
    workers = cluster.get("worker")
    if not isinstance(workers, list) or not workers:
        raise DistributedError(f'{TF_CONFIG}.cluster.worker must be a non-empty list of "host:port"')
    for address in workers:
        _check_address(address, f"{TF_CONFIG}.cluster.worker")
    if len(set(workers)) != len(workers):
        raise DistributedError(f"{TF_CONFIG}.cluster.worker lists an address twice: {workers}")
    if task.get("type") != "worker":
        raise DistributedError(f'{TF_CONFIG}.task.type is {task.get("type")!r}; it must be "worker"')
    index = task.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(workers):
        raise DistributedError(
            f"{TF_CONFIG}.task.index is {index!r}; it must be this worker's position in cluster.worker, "
            f"0 to {len(workers) - 1}"
        )
    return Cluster(tuple(workers), index)


def _check_address(address: object, where: str) -> None:
    host, _, port = str(address).rpartition(":")
    if not isinstance(address, str) or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DistributedError(f'{where}: {address!r} is not "host:port" (a port from 1 to 65535)')


def batch_node(env: Mapping[str, str]) -> BatchNode | None:
    """Batch's MNP variables, checked; None when this is not an MNP node (none of them set)."""
    names = (NODE_INDEX, NUM_NODES, MAIN_NODE_INDEX)
    if not any(env.get(name) for name in names):
        return None
    missing = [name for name in names if not env.get(name)]
    if missing:
        raise DistributedError(
            f"{', '.join(missing)} not set, though {', '.join(n for n in names if n not in missing)} is: AWS Batch "
            "sets all three on every node of a multi-node parallel job; run this as one, or unset the others"
        )
    num_nodes = _integer(env, NUM_NODES, 1)
    node_index = _integer(env, NODE_INDEX, 0, num_nodes - 1)
    main_index = _integer(env, MAIN_NODE_INDEX, 0, num_nodes - 1)
    address = env.get(MAIN_NODE_ADDRESS, "").strip() or None
    if node_index != main_index and num_nodes > 1:
        if address is None:
            raise DistributedError(
                f"{MAIN_NODE_ADDRESS} is not set on child node {node_index}: Batch sets it on every node but the "
                f"main one ({MAIN_NODE_INDEX}={main_index}); without it this node cannot find the main node"
            )
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise DistributedError(
                f"{MAIN_NODE_ADDRESS} is {address!r}, not an IPv4 address: it must be the main node's private "
                "address as Batch sets it"
            ) from None
    return BatchNode(node_index, num_nodes, main_index, address)


def _integer(env: Mapping[str, str], name: str, low: int, high: int | None = None) -> int:
    value = env.get(name, "").strip()
    if not value.isdigit() or int(value) < low or (high is not None and int(value) > high):
        span = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise DistributedError(f"{name} is {value!r}; it must be a whole number {span}")
    return int(value)


def task_rank(node_index: int, main_index: int) -> int:
    """This node's TensorFlow task index: the main node is worker 0 (the chief, whose exit decides the Batch job's
    status and which holds the MLflow run), the children follow in node-index order."""
    if node_index == main_index:
        return 0
    return node_index + 1 if node_index < main_index else node_index


def cluster_from_batch(node: BatchNode, env: Mapping[str, str]) -> Cluster:
    """Run the rendezvous (the main node serves it, each child checks in) and return the cluster it agreed on."""
    worker_port = _port(env, WORKER_PORT, DEFAULT_WORKER_PORT)
    rendezvous_port = _port(env, RENDEZVOUS_PORT, DEFAULT_RENDEZVOUS_PORT)
    if worker_port == rendezvous_port:
        raise DistributedError(
            f"{WORKER_PORT} and {RENDEZVOUS_PORT} are both {worker_port}: TensorFlow's server and the rendezvous "
            "need a port each; set one of them to another port"
        )
    timeout = _seconds(env, RENDEZVOUS_TIMEOUT, DEFAULT_RENDEZVOUS_TIMEOUT)
    secret = _secret(env)
    rank = task_rank(node.node_index, node.main_index)
    if node.is_main:
        workers = rendezvous.serve(
            # All interfaces by default: the children, on other instances, must reach it.
            env.get(RENDEZVOUS_BIND, "0.0.0.0"),
            rendezvous_port,
            node.num_nodes,
            worker_port,
            timeout,
            secret,
        )
    else:
        assert node.main_address is not None  # batch_node refused a child without it
        workers = rendezvous.join(
            node.main_address, rendezvous_port, rank, node.num_nodes, worker_port, timeout, secret
        )
    return Cluster(tuple(workers), rank)


def _secret(env: Mapping[str, str]) -> str:
    secret = env.get(RENDEZVOUS_SECRET, "")
    if not secret:
        raise DistributedError(
            f"{RENDEZVOUS_SECRET} is not set: the nodes of a multi-node job prove to each other with the job's own "
            "secret; submit the job with `gpu-runner batch submit --multinode`, which sets it, or set the same "
            f"random value of at least {MIN_SECRET_LENGTH} characters on every node"
        )
    if len(secret) < MIN_SECRET_LENGTH:
        raise DistributedError(
            f"{RENDEZVOUS_SECRET} is {len(secret)} characters; the job's secret must be a random value of at least "
            f"{MIN_SECRET_LENGTH} (`gpu-runner batch submit --multinode` draws 43)"
        )
    return secret


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    if not env.get(name, "").strip():
        return default
    return _integer(env, name, 1, 65535)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise DistributedError(f"{name} is {value!r}; it must be a number of seconds above 0")
    return seconds
