"""The address exchange of a multi-node job: the main node listens, every child checks in, the main node answers
all of them with the one worker list, in rank order. Plain TCP and one JSON line each way (stdlib only).

Why it exists: AWS Batch tells a child node only the main node's address and the main node nobody's
(distributed.py cites the User Guide), while TensorFlow's TF_CONFIG needs every worker's host:port on every
worker. So the main node learns each child's address from the connection itself (the peer address it sees, not
a claim in the message) and its own from the address the children dialled (the socket's local end, which is
AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS): no node has to discover its own IP.

Trust: like TensorFlow's own gRPC servers ("meant for internal communication only. It is not built for use in an
untrusted network": https://github.com/tensorflow/tensorflow/blob/master/SECURITY.md, "Running a TensorFlow
server"), the port is for the job's nodes only (the job's security group admits its own members and nobody else).
A malformed or inconsistent check-in ends the rendezvous with an error on every node instead of training with a
wrong cluster; a well-formed one for a rank, sent before the real node's, is not detected (docs/security.md).
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass

from .errors import DistributedError

# One check-in or answer is a few hundred bytes; anything longer is not this protocol.
MAX_LINE = 64 * 1024
# How long a child waits between attempts to reach a main node that is not listening yet.
RETRY_SECONDS = 1.0


@dataclass
class _CheckIn:
    rank: int
    address: str
    connection: socket.socket


def serve(bind: str, port: int, num_nodes: int, worker_port: int, timeout: float) -> list[str]:
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
                check_in = _read_check_in(connection, peer[0], num_nodes, deadline)
                _refuse_duplicates(check_in, checked_in)
                checked_in[check_in.rank] = check_in
            workers = [f"{own_host}:{worker_port}"] + [checked_in[r].address for r in range(1, num_nodes)]
            if len(set(workers)) != len(workers):
                raise DistributedError(
                    f"rendezvous: two workers share an address ({workers}): nodes on one host need their own "
                    "MNP_WORKER_PORT each"
                )
            for check_in in checked_in.values():
                _send(check_in.connection, {"workers": workers})
            return workers
        except DistributedError as error:
            # Every node that checked in fails with the main node's reason, instead of waiting out its timeout.
            for check_in in checked_in.values():
                _send(check_in.connection, {"error": str(error)}, quiet=True)
            raise
        finally:
            for check_in in checked_in.values():
                check_in.connection.close()


def _read_check_in(connection: socket.socket, peer: str, num_nodes: int, deadline: float) -> _CheckIn:
    fields = ("rank", "num_nodes", "worker_port")
    try:
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
    if nodes != num_nodes:
        problem = f"it counts {nodes} node(s), this node {num_nodes}: every node must see the same AWS_BATCH_JOB_NUM_NODES"
    elif not 0 < rank < num_nodes:
        problem = f"its rank {rank} is not a child's (1 to {num_nodes - 1})"
    elif not 0 < port < 65536:
        problem = f"its MNP_WORKER_PORT {port} is not a port (1 to 65535)"
    if problem:
        _send(connection, {"error": f"rendezvous refused {peer}: {problem}"}, quiet=True)
        connection.close()
        raise DistributedError(f"rendezvous: refused {peer}: {problem}")
    return _CheckIn(rank, f"{peer}:{port}", connection)


def _refuse_duplicates(check_in: _CheckIn, checked_in: dict[int, _CheckIn]) -> None:
    if check_in.rank in checked_in:
        error = DistributedError(
            f"rendezvous: rank {check_in.rank} checked in twice ({checked_in[check_in.rank].address} and "
            f"{check_in.address}): each node needs its own AWS_BATCH_JOB_NODE_INDEX"
        )
        _send(check_in.connection, {"error": str(error)}, quiet=True)
        check_in.connection.close()
        raise error


def join(main_host: str, port: int, rank: int, num_nodes: int, worker_port: int, timeout: float) -> list[str]:
    """On a child node: check in with the main node (retrying until it listens) and return the worker list."""
    deadline = time.monotonic() + timeout
    connection = _connect(main_host, port, deadline, timeout)
    with connection:
        _send(connection, {"rank": rank, "num_nodes": num_nodes, "worker_port": worker_port})
        answer = _receive(connection, deadline)
    if "error" in answer:
        raise DistributedError(f"the main node {main_host} ended the rendezvous: {answer['error']}")
    workers = answer.get("workers")
    if (
        not isinstance(workers, list)
        or len(workers) != num_nodes
        or not all(isinstance(w, str) for w in workers)
    ):
        raise DistributedError(
            f"rendezvous: the main node {main_host} answered {answer!r}, not a worker list"
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
