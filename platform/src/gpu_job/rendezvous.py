"""The address exchange of a multi-node job: the main node listens, every child checks in, the main node answers
all of them with the one worker list, in rank order. Plain TCP and one JSON line each way (stdlib only).

Why it exists: AWS Batch tells a child node only the main node's address and the main node nobody's
(distributed.py cites the User Guide), while TensorFlow's TF_CONFIG needs every worker's host:port on every
worker. So the main node learns each child's address from the connection itself (the peer address it sees, not
a claim in the message) and its own from the address the children dialled (the socket's local end, which is
AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS): no node has to discover its own IP.

Trust: the port is for the job's nodes only, but the multi-node security group admits every multi-node node of the
project, so another job's code can reach it (manual/security.md). Every node of one job holds the job's secret
(MNP_RENDEZVOUS_SECRET, distributed.py says where it comes from); nobody else does. The main node opens each
connection with a fresh random challenge, and a check-in counts only with its proof: HMAC-SHA256 under the secret
over the challenge and the check-in's fields, compared in constant time (hmac.compare_digest); the answer carries
the main node's proof over the same challenge and the worker list, so a child trusts no other listener either. A
check-in without the right proof, malformed or inconsistent ends the rendezvous with an error on every node (as
every refusal here does) instead of training with a wrong cluster: a stranger can make a job fail to start, never
join it. Like TensorFlow's own gRPC servers ("not built for use in an untrusted network":
https://github.com/tensorflow/tensorflow/blob/master/SECURITY.md, "Running a TensorFlow server"), the worker
port itself stays unauthenticated.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import time
from dataclasses import dataclass

from .errors import DistributedError

# One check-in or answer is a few hundred bytes; anything longer is not this protocol.
MAX_LINE = 64 * 1024
# How long a child waits between attempts to reach a main node that is not listening yet.
RETRY_SECONDS = 1.0
# What each proof is over, so a check-in's proof can never stand for an answer's or the other way round.
CHECK_IN, ANSWER = b"check-in\n", b"answer\n"


@dataclass
class _CheckIn:
    rank: int
    address: str
    connection: socket.socket
    challenge: str


def proof(secret: str, label: bytes, fields: dict) -> str:
    """HMAC-SHA256 under the job's secret over `label` and the fields as canonical JSON (sorted keys, no spaces)."""
    payload = label + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def _proven(secret: str, label: bytes, fields: dict, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(proof(secret, label, fields), given)


def serve(bind: str, port: int, num_nodes: int, worker_port: int, timeout: float, secret: str) -> list[str]:
    """On the main node (rank 0): wait for the other num_nodes - 1 nodes, answer them, return the worker list."""
    deadline = time.monotonic() + timeout
    checked_in: dict[int, _CheckIn] = {}
    with socket.create_server((bind, port)) as server:
        try:
            own_host = None
            while len(checked_in) < num_nodes - 1:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = sorted(set(range(1, num_nodes)) - set(checked_in))
                    raise DistributedError(
                        f"rendezvous: after {timeout:.0f} s, worker rank(s) {missing} of {num_nodes} never checked "
                        f"in on port {port}: check that the job's security group lets its nodes reach each other on "
                        "this port, or raise MNP_RENDEZVOUS_TIMEOUT_SECONDS when nodes start slowly"
                    )
                server.settimeout(remaining)
                try:
                    connection, peer = server.accept()
                except TimeoutError:
                    continue
                own_host = own_host or connection.getsockname()[0]
                check_in = _read_check_in(connection, peer[0], num_nodes, deadline, secret)
                _refuse_duplicates(check_in, checked_in)
                checked_in[check_in.rank] = check_in
            workers = [f"{own_host}:{worker_port}"] + [checked_in[r].address for r in range(1, num_nodes)]
            if len(set(workers)) != len(workers):
                raise DistributedError(
                    f"rendezvous: two workers share an address ({workers}): nodes on one host need their own "
                    "MNP_WORKER_PORT each"
                )
            for check_in in checked_in.values():
                signed = {"challenge": check_in.challenge, "workers": workers}
                _send(check_in.connection, {"workers": workers, "proof": proof(secret, ANSWER, signed)})
            return workers
        except DistributedError as error:
            # Every node that checked in fails with the main node's reason, instead of waiting out its timeout.
            for check_in in checked_in.values():
                _send(check_in.connection, {"error": str(error)}, quiet=True)
            raise
        finally:
            for check_in in checked_in.values():
                check_in.connection.close()


def _read_check_in(
    connection: socket.socket, peer: str, num_nodes: int, deadline: float, secret: str
) -> _CheckIn:
    fields = ("rank", "num_nodes", "worker_port")
    challenge = secrets.token_hex(32)
    try:
        _send(connection, {"challenge": challenge}, quiet=True)  # a peer that left fails on the read below
        message = _receive(connection, deadline)
        values = [message.get(name) for name in fields]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise DistributedError(f"{', '.join(fields)} must be whole numbers; got {message!r}"[:300])
    except DistributedError as error:
        connection.close()
        raise DistributedError(
            f"rendezvous: {peer} sent no valid check-in ({error}); only this job's nodes may reach the "
            "rendezvous port"
        ) from None
    rank, nodes, port = values
    problem = ""
    signed = {"challenge": challenge, **{name: message[name] for name in fields}}
    if not _proven(secret, CHECK_IN, signed, message.get("proof")):
        # First: a stranger learns nothing about this job's cluster from the reason it was refused.
        problem = (
            "its check-in does not prove this job's MNP_RENDEZVOUS_SECRET (only this job's nodes hold it; "
            "another job, or a node submitted without `gpu-runner batch submit --multinode`, cannot)"
        )
    elif nodes != num_nodes:
        problem = f"it counts {nodes} node(s), this node {num_nodes}: every node must see the same AWS_BATCH_JOB_NUM_NODES"
    elif not 0 < rank < num_nodes:
        problem = f"its rank {rank} is not a child's (1 to {num_nodes - 1})"
    elif not 0 < port < 65536:
        problem = f"its MNP_WORKER_PORT {port} is not a port (1 to 65535)"
    if problem:
        _send(connection, {"error": f"rendezvous refused {peer}: {problem}"}, quiet=True)
        connection.close()
        raise DistributedError(f"rendezvous: refused {peer}: {problem}")
    return _CheckIn(rank, f"{peer}:{port}", connection, challenge)


def _refuse_duplicates(check_in: _CheckIn, checked_in: dict[int, _CheckIn]) -> None:
    if check_in.rank in checked_in:
        error = DistributedError(
            f"rendezvous: rank {check_in.rank} checked in twice ({checked_in[check_in.rank].address} and "
            f"{check_in.address}): each node needs its own AWS_BATCH_JOB_NODE_INDEX"
        )
        _send(check_in.connection, {"error": str(error)}, quiet=True)
        check_in.connection.close()
        raise error


def join(
    main_host: str, port: int, rank: int, num_nodes: int, worker_port: int, timeout: float, secret: str
) -> list[str]:
    """On a child node: check in with the main node (retrying until it listens) and return the worker list."""
    deadline = time.monotonic() + timeout
    connection = _connect(main_host, port, deadline, timeout)
    with connection:
        opening = _receive(connection, deadline)
        challenge = opening.get("challenge")
        if "error" in opening or not isinstance(challenge, str):
            answer = opening
        else:
            check_in = {"rank": rank, "num_nodes": num_nodes, "worker_port": worker_port}
            signed = proof(secret, CHECK_IN, {"challenge": challenge, **check_in})
            _send(connection, {**check_in, "proof": signed})
            answer = _receive(connection, deadline)
    if "error" in answer:
        raise DistributedError(f"the main node {main_host} ended the rendezvous: {answer['error']}")
    workers = answer.get("workers")
    if (
        not isinstance(challenge, str)
        or not isinstance(workers, list)
        or len(workers) != num_nodes
        or not all(isinstance(w, str) for w in workers)
    ):
        raise DistributedError(
            f"rendezvous: the main node {main_host} answered {str(answer)[:300]}, not a worker list"
        )
    if not _proven(secret, ANSWER, {"challenge": challenge, "workers": workers}, answer.get("proof")):
        raise DistributedError(
            f"rendezvous: the answer from {main_host} does not prove this job's MNP_RENDEZVOUS_SECRET: it is not "
            "this job's main node"
        )
    return workers


def _connect(host: str, port: int, deadline: float, timeout: float) -> socket.socket:
    # Batch launches the children after the main node, but its container may still be starting: retry.
    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            return socket.create_connection(
                (host, port), timeout=max(0.1, min(5.0, deadline - time.monotonic()))
            )
        except OSError as error:
            last = error
            time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
    raise DistributedError(
        f"rendezvous: could not reach the main node at {host}:{port} within {timeout:.0f} s ({last}): check that "
        "the job's security group lets its nodes reach each other on MNP_RENDEZVOUS_PORT"
    )


def _send(connection: socket.socket, message: dict, quiet: bool = False) -> None:
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        if not quiet:
            raise


def _receive(connection: socket.socket, deadline: float) -> dict:
    """One JSON line, within the deadline."""
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DistributedError("rendezvous: timed out waiting for the other side's message")
        connection.settimeout(remaining)
        try:
            chunk = connection.recv(4096)
        except TimeoutError:
            continue
        if not chunk:
            raise DistributedError(
                "rendezvous: the other side closed the connection before its message ended"
            )
        data += chunk
        if len(data) > MAX_LINE:
            raise DistributedError(f"rendezvous: message longer than {MAX_LINE} bytes")
    try:
        message = json.loads(data)
    except json.JSONDecodeError:
        raise DistributedError("rendezvous: the message is not JSON") from None
    if not isinstance(message, dict):
        raise DistributedError("rendezvous: the message is not a JSON object")
    return message
