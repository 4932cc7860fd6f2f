"""The boot script's own download and verify functions, run by bash with the real curl and sha256sum against a
file server on 127.0.0.1: a tarball whose bytes differ from the pinned SHA-256, or one with no SHA-256 at all,
is refused before anything unpacks it (item 8 of issue 13: a runner download that cannot be verified fails
closed). The whole boot's reaction (no runner started, the instance halts) is in test_user_data.py."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gpu_runner.ec2_runner.user_data import template
from gpu_runner_testing.local_http import LocalHttpServer

GOOD = b"the runner tarball GitHub published\n" * 64
TAMPERED = GOOD.replace(b"published", b"backdoored")
TARBALL = "actions-runner-linux-x64-2.330.0.tar.gz"
Fetch = Callable[[bytes, str], subprocess.CompletedProcess[str]]


def test_the_published_tarball_is_verified(fetch: Fetch) -> None:
    result = fetch(GOOD, hashlib.sha256(GOOD).hexdigest())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "runner: SHA-256 verified" in result.stdout


def test_a_tampered_tarball_fails_closed(fetch: Fetch) -> None:
    result = fetch(TAMPERED, hashlib.sha256(GOOD).hexdigest())
    assert result.returncode != 0
    assert f"SHA-256 of {TARBALL} does not match" in result.stdout
    assert "verified" not in result.stdout


@pytest.mark.parametrize("sha", ["", "None", "0" * 63], ids=["missing", "unparsed", "short"])
def test_a_tarball_without_a_digest_fails_closed(fetch: Fetch, sha: str) -> None:
    result = fetch(GOOD, sha)
    assert result.returncode != 0
    assert f"no SHA-256 to verify {TARBALL} against; refusing to run it" in result.stdout


def _function(script: str, name: str) -> str:
    """One shell function of the boot script, verbatim: the test runs the code that ships, not a copy."""
    match = re.search("^" + re.escape(name) + r"\(\) \{.*?^\}$", script, re.S | re.M)
    assert match, f"user_data.sh has no function {name}()"
    return match.group(0)


class _Files(BaseHTTPRequestHandler):
    body = GOOD

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def fetch(tmp_path: Path) -> Fetch:
    if shutil.which("curl") is None:
        pytest.skip("curl not installed")
    script = template()
    functions = "\n".join(_function(script, name) for name in ("log", "download", "verify_runner"))
    driver = tmp_path / "fetch.sh"
    driver.write_text(
        f"set -Eeuo pipefail\nLOG_FILE={tmp_path}/boot.log\n{functions}\n"
        'download "$1" "$2"\nverify_runner "$2" "$3"\n',
        encoding="utf-8",
    )

    def run(body: bytes, sha: str) -> subprocess.CompletedProcess[str]:
        handler = type("Files", (_Files,), {"body": body})
        with LocalHttpServer(handler) as server:
            return subprocess.run(
                ["bash", str(driver), f"{server.url}/{TARBALL}", str(tmp_path / TARBALL), sha],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip

    return run
