"""What a multi-node test needs on one machine: free loopback ports, the variables AWS Batch sets on one node of a
multi-node parallel job, and an explicit TF_CONFIG. Shared by the platform's tests of gpu_job.distributed and a
project's tests that train on two real worker processes.

The variables are the ones the AWS Batch User Guide lists ("Multi-node parallel jobs" > "Environment variables",
https://docs.aws.amazon.com/batch/latest/userguide/mnp-env-vars.html): the main node gets no main-node address.
"""

from __future__ import annotations

import json
import socket

# The job's rendezvous secret, as `gpu-runner batch submit --multinode` gives every node of one job.
SECRET = "s" * 43


def free_ports(count: int) -> list[int]:
    """Distinct free ports on 127.0.0.1 (all bound at once, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def batch_env(node: int, nodes: int, main: int, **extra: str) -> dict[str, str]:
    """What AWS Batch sets on one node of a multi-node job (the main node gets no main-node address), with the
    job's rendezvous secret from its submission."""
    env = {
        "AWS_BATCH_JOB_NODE_INDEX": str(node),
        "AWS_BATCH_JOB_NUM_NODES": str(nodes),
        "AWS_BATCH_JOB_MAIN_NODE_INDEX": str(main),
        "MNP_RENDEZVOUS_SECRET": SECRET,
    }
    if node != main:
        env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = "127.0.0.1"
    return {**env, **extra}


def tf_config(workers: list[str], index: int) -> str:
    """An explicit TF_CONFIG: this process is worker `index` of `workers`."""
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
