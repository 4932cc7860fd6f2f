"""The container host of moto's AWS Batch backend, as local processes: a moto server whose jobs really run.

moto's Batch backend runs each job in a thread (moto/batch/models.py, Job.run, moto 5.x) that asks
`self.docker_client.containers.run(detach=True, ...)` (DockerModel, moto/utilities/docker_utilities.py) for a
container and then reads only this of it: `.reload()`, `.status` ("running" while it runs), `.attrs
["NetworkSettings"]["Networks"]` (the main node's address for the other nodes of a multi-node job), `.logs(stdout=,
stderr=, timestamps=True, since=)` (bytes, one "<RFC 3339 time> <line>" a line), `.wait()` ({"StatusCode": n}),
`.kill()` and `.remove()`. This double answers exactly that with a subprocess: the container's command as an argv
list (never a shell string), in a temporary directory, with the job's environment and no image at all.

`python -m gpu_runner_testing.batch_host --port N` installs it and starts moto's server on 127.0.0.1 (pytest_plugin.py,
`batch_endpoint`). What moto does not do, and so nothing here shows:
- logs reach CloudWatch only when a container has ended (Job.run collects them after the wait), so a "live"
  stream is the whole output at once;
- retryStrategy is stored, never applied ("not yet implemented" in SubmitJob's docstring): there is one attempt.
  A host loss is simulated (RECLAIM_WHEN: the process killed, the job's and attempt's statusReason set to Batch's
  "Host EC2 (instance i-...) terminated."), but moto starts no second attempt after it;
- a multi-node job's nodes share the parent's log stream and are not describable as <job id>#<node>; moto keeps
  no SubmitJob nodeOverrides: this double keeps them on moto's Job (install()) and gives each node the
  variables of the ranges that target it, as Batch does (botocore 1.44.8's batch model, NodePropertyOverride
  targetNodes), but not their command (each node runs its job definition's);
- DescribeJobs drops the container's exit code (Job.describe replaces describe_short's `container`); ListJobs
  keeps it.

Environment variables real Batch sets ("AWS Batch job environment variables", docs.aws.amazon.com/batch/latest/
userguide/job_env_vars.html, read 2026-12-04) that moto does not: moto sets AWS_BATCH_JOB_ID on container jobs
only (Job._get_container_property) and AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS on the non-main nodes. The
double adds AWS_BATCH_JOB_ARRAY_INDEX and AWS_BATCH_JOB_ARRAY_SIZE (array children), AWS_BATCH_JOB_NODE_INDEX,
AWS_BATCH_JOB_MAIN_NODE_INDEX, AWS_BATCH_JOB_NUM_NODES and AWS_BATCH_JOB_ID (multi-node, "<id>#<node>"),
AWS_BATCH_JOB_ATTEMPT (the attempt moto is on) and AWS_BATCH_JQ_NAME, read from moto's own record of the job.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# moto names a container "<job name>-<job id with ':' as '-'>" and a node's "<job name>-<job id>-<node>".
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
LOOPBACK = "127.0.0.1"
# A job whose environment names a file here loses its host when that file appears (LocalContainer._reclaim).
RECLAIM_WHEN = "BATCH_HOST_DOUBLE_RECLAIM_WHEN"
HOST_LOST = "Host EC2 (instance i-0123456789abcdef0) terminated."
# The job role's credentials: ECS hands a container its task role through AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
# ("IAM roles for tasks", Amazon ECS Developer Guide), never through its environment. Here a job that names no AWS
# credentials of its own gets moto's test keys and this server's address instead (main() sets them), so a job
# submitted by a workflow (which cannot know the test endpoint) reaches the same S3 as its submitter.
JOB_ROLE_STANDIN: dict[str, str] = {}
# The SubmitJob being handled on this thread: its nodeOverrides.nodePropertyOverrides, which moto drops, handed to
# the Job moto makes for it (install(); moto may start the job's nodes before its SubmitJob answer is sent).
_SUBMITTING = threading.local()


def _targets(node_range: str, node: int, num_nodes: int) -> bool:
    """Whether a targetNodes range ("2", "0:", ":3", "1:2") covers a node index."""
    start, colon, end = node_range.partition(":")
    if not colon:
        return node == int(start)
    return int(start or 0) <= node <= (int(end) if end else num_nodes - 1)


def node_override_environment(job: Any, node: int, num_nodes: int) -> dict[str, str]:
    """The environment SubmitJob's node overrides give one node, later ranges over earlier ones."""
    env: dict[str, str] = {}
    for override in getattr(job, "node_overrides", None) or []:
        if _targets(override.get("targetNodes", ""), node, num_nodes):
            variables = override.get("containerOverrides", {}).get("environment", [])
            env.update({item["name"]: item["value"] for item in variables})
    return env


def _moto_job(job_id: str) -> Any:
    """moto's Job object for an id, from the backends of this process (every account and region)."""
    from moto.batch.models import batch_backends

    for account in batch_backends.values():
        for backend in account.values():
            job = backend._jobs.get(job_id)
            if job is not None:
                return job
    return None


def batch_variables(name: str, environment: dict[str, str]) -> dict[str, str]:
    """The AWS_BATCH_* variables real Batch sets and moto leaves out, for the container moto named `name`."""
    added: dict[str, str] = {}
    given_id = environment.get("AWS_BATCH_JOB_ID", "")
    if ":" in given_id:  # an array child: moto's id is "<parent id>:<index>"
        parent_id, index = given_id.rsplit(":", 1)
        added["AWS_BATCH_JOB_ARRAY_INDEX"] = index
        parent = _moto_job(parent_id)
        # The request's size: moto links the children to the parent only after it has started them all.
        if parent is not None and parent.array_properties.get("size"):
            added["AWS_BATCH_JOB_ARRAY_SIZE"] = str(parent.array_properties["size"])
        job = _moto_job(given_id)
    elif given_id:
        job = _moto_job(given_id)
    else:  # a multi-node node: no AWS_BATCH_JOB_ID from moto, the node index is the name's last part
        match = re.search(rf"({UUID})-(\d+)$", name)
        job = _moto_job(match.group(1)) if match else None
        if match and job is not None:
            nodes = job.job_definition.node_properties or {}
            added["AWS_BATCH_JOB_ID"] = f"{match.group(1)}#{match.group(2)}"
            added["AWS_BATCH_JOB_NODE_INDEX"] = match.group(2)
            added["AWS_BATCH_JOB_MAIN_NODE_INDEX"] = str(nodes.get("mainNode", 0))
            added["AWS_BATCH_JOB_NUM_NODES"] = str(nodes.get("numNodes", 1))
            added.update(node_override_environment(job, int(match.group(2)), nodes.get("numNodes", 1)))
    if job is not None:
        added["AWS_BATCH_JOB_ATTEMPT"] = str(max(1, len(job.attempts)))
        added["AWS_BATCH_JQ_NAME"] = job.job_queue.name
    return added


def _on_a_container_instance(job: Any) -> None:
    """Give the running attempt the container instance a real one names (DescribeJobs' AttemptContainerDetail
    containerInstanceArn, arn:aws:ecs:<region>:<account>:container-instance/<cluster>/<id>) where moto writes
    "TBD" (Job._start_attempt), in the cluster of the queue's first compute environment. moto's ECS knows no such
    instance: DescribeContainerInstances is asked as on AWS and answers a failure, and the cost falls back to the
    queue's types as documented (batch_cost.instance_of)."""
    if job is None or not job.attempts:
        return
    environments = [ce for ce in job.job_queue.environments if ce.ecs_arn]
    details = job.attempts[-1].get("container", {})
    if environments and details.get("containerInstanceArn") in (None, "TBD"):
        cluster = environments[0].ecs_arn
        details["containerInstanceArn"] = (
            f"{cluster.replace(':cluster/', ':container-instance/')}/{uuid.uuid4().hex}"
        )
        # And its task: "The Amazon Resource Name (ARN) of the Amazon ECS task that's associated with the job
        # attempt" (botocore's batch model, AttemptContainerDetail taskArn), arn:aws:ecs:<region>:<account>:task/
        # <cluster>/<task id>, where moto writes the job definition's ARN.
        details["taskArn"] = f"{cluster.replace(':cluster/', ':task/')}/{uuid.uuid4().hex}"
        _describable(cluster)


def _describable(cluster_arn: str) -> None:
    """moto's ECS (5.x, describe_container_instances) reads `container_instances[<cluster name>]`, which exists only
    once an instance was registered there: for the cluster of a compute environment that never had one it raises
    KeyError (HTTP 500). AWS answers such a look-up with a failure entry (reason MISSING); an empty record of the
    cluster makes moto do that too."""
    from moto.ecs.models import ecs_backends

    _, _, _, region, account, resource = cluster_arn.split(":", 5)
    ecs_backends[account][region].container_instances.setdefault(resource.split("/", 1)[1], {})


class LocalContainer:
    """One job container as a process group; its output lines kept with the time each was read."""

    def __init__(self, command: list[str], environment: dict[str, str], name: str) -> None:
        self.name = name
        self.workdir = Path(tempfile.mkdtemp(prefix="batch-job-"))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            **({} if "AWS_ACCESS_KEY_ID" in environment else JOB_ROLE_STANDIN),
            **environment,
            **batch_variables(name, environment),
        }
        # The job (an array child's own id; a node's parent id): moto's Job owns the attempt.
        self.job_id = env.get("AWS_BATCH_JOB_ID", "").split("#", 1)[0]
        self._lines: dict[str, list[tuple[datetime, str]]] = {"stdout": [], "stderr": []}
        self._lock = threading.Lock()
        # argv, no shell: the command is the job's, from the branch's code, and must never be re-parsed.
        self.process = subprocess.Popen(
            command, cwd=self.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self._readers = [
            threading.Thread(target=self._read, args=(stream, pipe), daemon=True)
            for stream, pipe in (("stdout", self.process.stdout), ("stderr", self.process.stderr))
        ]
        for reader in self._readers:
            reader.start()
        self.status = "running"
        reclaim = environment.get(RECLAIM_WHEN)
        if reclaim:
            threading.Thread(target=self._reclaim, args=(Path(reclaim), environment), daemon=True).start()
        # Every node on loopback: the main node's address for the others (moto reads the "bridge" network).
        self.attrs = {
            "NetworkSettings": {"IPAddress": LOOPBACK, "Networks": {"bridge": {"IPAddress": LOOPBACK}}}
        }

    def _reclaim(self, trigger: Path, environment: dict[str, str]) -> None:
        """A Spot reclaim of the host: once the test creates `trigger`, the job gets the reason Batch writes for a
        host that went away, on the job and its attempt, and its process dies as with its instance."""
        while self.process.poll() is None and not trigger.exists():
            time.sleep(0.1)
        job = _moto_job(environment.get("AWS_BATCH_JOB_ID", ""))
        if self.process.poll() is not None or job is None:
            return
        job.job_stopped_reason = HOST_LOST
        if job.latest_attempt is not None:
            job.latest_attempt["statusReason"] = HOST_LOST
        self.kill()

    def _read(self, stream: str, pipe: Any) -> None:
        for raw in iter(pipe.readline, b""):
            with self._lock:
                self._lines[stream].append((datetime.now(UTC), raw.decode(errors="replace").rstrip("\n")))
        pipe.close()

    def reload(self) -> None:
        self.status = "running" if self.process.poll() is None else "exited"

    def logs(
        self, stdout: bool = True, stderr: bool = True, timestamps: bool = False, since: int = 0
    ) -> bytes:
        if self.process.poll() is not None:
            # Every line of an ended process, before moto copies them to CloudWatch.
            for reader in self._readers:
                reader.join(timeout=5)
        with self._lock:
            picked = [
                (at, line)
                for stream, wanted in (("stdout", stdout), ("stderr", stderr))
                if wanted
                for at, line in self._lines[stream]
                if at.timestamp() >= since
            ]
        # Docker's --timestamps form: RFC 3339 with nanoseconds, then a space, then the line.
        out = [
            f"{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {line}" if timestamps else line for at, line in picked
        ]
        return ("\n".join(out) + ("\n" if out else "")).encode()

    def wait(self) -> dict[str, int]:
        code = self.process.wait()
        # A process ended by signal N is a container that exits 128 + N (137 after kill()), as Docker reports it.
        return {"StatusCode": 128 - code if code < 0 else code}

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has ended on its own
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.status = "exited"

    def remove(self) -> None:
        if self.process.poll() is None:
            self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


class LocalContainers:
    """`docker_client.containers`: run() only, the one call Job.run makes."""

    def __init__(self) -> None:
        self.started: list[LocalContainer] = []

    def run(self, *, image: str, command: list[str] | str, environment: dict[str, str], name: str,
            detach: bool = False, **_ignored: Any) -> LocalContainer:  # fmt: skip
        if not detach:
            raise NotImplementedError("moto's Job.run always detaches")
        # moto hands a string command on as one argv element (Job._add_parameters_to_command): run it as such.
        argv = [command] if isinstance(command, str) else list(command)
        container = LocalContainer(argv, {k: str(v) for k, v in environment.items()}, name)
        _on_a_container_instance(_moto_job(container.job_id))
        self.started.append(container)
        return container


class LocalDockerClient:
    def __init__(self) -> None:
        self.containers = LocalContainers()


def install() -> None:
    """Every moto model that asks for Docker (DockerModel.docker_client) gets the local host instead, and SubmitJob
    is held to the limits AWS documents and moto ignores (gpu_runner_testing/aws_limits.py: the 30 KiB job payload)."""
    from moto.batch.exceptions import ClientException
    from moto.batch.models import Job
    from moto.batch.responses import BatchResponse
    from moto.utilities import docker_utilities

    from gpu_runner_testing import aws_limits

    client = LocalDockerClient()
    docker_utilities.DockerModel.docker_client = property(lambda _self: client)  # type: ignore[assignment]
    submit = BatchResponse.submitjob

    def submit_within_limits(self: BatchResponse) -> str:
        body = self.body.decode("utf-8", "replace") if isinstance(self.body, bytes) else str(self.body or "")
        refusal = aws_limits.check("SubmitJob", body)
        if refusal is not None:
            raise ClientException(refusal.message)
        _SUBMITTING.node_overrides = (self._get_param("nodeOverrides") or {}).get("nodePropertyOverrides", [])
        try:
            return submit(self)
        finally:
            _SUBMITTING.node_overrides = []

    BatchResponse.submitjob = submit_within_limits  # type: ignore[method-assign]
    make_job = Job.__init__

    def job_keeping_node_overrides(self: Job, *args: Any, **kwargs: Any) -> None:
        make_job(self, *args, **kwargs)
        self.node_overrides = getattr(_SUBMITTING, "node_overrides", [])

    Job.__init__ = job_keeping_node_overrides  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    install()
    JOB_ROLE_STANDIN.update(
        AWS_ENDPOINT_URL=f"http://{LOOPBACK}:{args.port}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    from moto.server import main as moto_main

    moto_main(["-H", LOOPBACK, "-p", str(args.port)])


if __name__ == "__main__":
    main(sys.argv[1:])
