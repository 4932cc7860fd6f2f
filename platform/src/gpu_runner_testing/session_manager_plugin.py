"""A stand-in for AWS's session-manager-plugin, the program the AWS CLI hands a started session to.

The real plugin opens a WebSocket to StreamUrl (ssmmessages, which nothing offline serves) and the SSM agent on the
instance connects to the document's host and portNumber there: localhost:<portNumber> when the document names no
host, else <host>:<portNumber> (amazon-ssm-agent agent/session/plugins/port/port.go, DialCall). This one speaks the
same command line and forwards the local port to where the test says that address of the instance is
(SESSION_MANAGER_DOUBLE_TARGETS, JSON {"<instance>:<host or localhost>:<port>": "127.0.0.1:<port>"}); every
accepted connection is appended to SESSION_MANAGER_DOUBLE_RECORD when set.

The command line is the AWS CLI's (awscli 1.46.3, awscli/customizations/sessionmanager.py, StartSessionCaller):
`session-manager-plugin --version` first, then `session-manager-plugin <response> <region> StartSession <profile>
<parameters JSON> <endpoint URL>`, where <response> is the name of the environment variable holding StartSession's
answer (AWS_SSM_START_SESSION_RESPONSE) for a plugin newer than 1.2.497.0, else the answer's JSON itself. The
answer holds SessionId, TokenValue and StreamUrl; the parameters are StartSession's own (Target, DocumentName,
Parameters). The version printed is the one GitHub's Ubuntu 24.04 image ships (actions/runner-images,
images/ubuntu/Ubuntu2404-Readme.md: AWS CLI Session Manager Plugin 1.2.694.0).

The document is read from SSM at the endpoint, as the agent reads it: its properties (type LocalPortForwarding,
portNumber, localPortNumber, with the parameters resolved) decide both ends. Run as `python -m
gpu_runner_testing.session_manager_plugin` through the shim `install(bin_dir)` writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import boto3

from gpu_runner_testing.ssm_sessions import document_content, resolved_properties

VERSION = "1.2.694.0"
RESPONSE_ENV = "AWS_SSM_START_SESSION_RESPONSE"
TARGETS_ENV = "SESSION_MANAGER_DOUBLE_TARGETS"
RECORD_ENV = "SESSION_MANAGER_DOUBLE_RECORD"
ARGV_ENV = "SESSION_MANAGER_DOUBLE_ARGV"  # a file: each call's argv and the answer it read, one JSON line
ARGC = 7  # the program and its six arguments


def install(bin_dir: Path) -> Path:
    """A `session-manager-plugin` on bin_dir that runs this module with this interpreter (whose environment has
    the platform's testing package installed: no PYTHONPATH needed)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "session-manager-plugin"
    shim.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m gpu_runner_testing.session_manager_plugin "$@"\n',
        encoding="utf-8",
    )
    shim.chmod(0o755)
    return shim


def _fail(message: str) -> int:
    print(f"session-manager-plugin double: {message}", file=sys.stderr, flush=True)
    return 1


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for each in (source, sink):
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)


def _serve(listener: socket.socket, destination: tuple[str, int], session_id: str) -> None:
    record = os.environ.get(RECORD_ENV)
    while True:
        client, _ = listener.accept()
        print(f"Connection accepted for session [{session_id}]", flush=True)
        if record:
            with open(record, "a", encoding="utf-8") as handle:
                handle.write(f"{session_id} {destination[0]}:{destination[1]}\n")
        try:
            upstream = socket.create_connection(destination, timeout=10)
        except OSError as error:
            print(f"connection to the instance's port failed: {error}", flush=True)
            client.close()
            continue
        upstream.settimeout(None)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _session(argv: list[str]) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    response_arg, region, operation, _profile, parameters_json, endpoint = argv[1:]
    if operation != "StartSession":
        raise ValueError(f"third argument is {operation!r}, not StartSession")
    raw = os.environ.get(response_arg, "") if response_arg == RESPONSE_ENV else response_arg
    response = json.loads(raw)
    if os.environ.get(ARGV_ENV):
        with open(os.environ[ARGV_ENV], "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"argv": argv[1:], "response": response}) + "\n")
    missing = {"SessionId", "TokenValue", "StreamUrl"} - set(response)
    if missing:
        raise ValueError(f"the StartSession answer lacks {sorted(missing)}")
    return response, json.loads(parameters_json), region, endpoint


def main(argv: list[str]) -> int:
    if argv[1:] == ["--version"]:
        print(VERSION)
        return 0
    if len(argv) != ARGC:
        return _fail(
            f"expected 6 arguments (response region StartSession profile parameters endpoint), got {len(argv) - 1}"
        )
    try:
        response, request, region, endpoint = _session(argv)
    except (ValueError, KeyError) as error:
        return _fail(str(error))
    ssm = boto3.client("ssm", region_name=region, endpoint_url=endpoint or None)
    content = document_content(ssm, request.get("DocumentName", "SSM-SessionManagerRunShell"))
    if content.get("sessionType") != "Port":
        return _fail(f"{request.get('DocumentName')} is a {content.get('sessionType')} session, not Port")
    properties = resolved_properties(content, request.get("Parameters", {}))
    if properties.get("type") != "LocalPortForwarding":
        return _fail(f"only local port forwarding is stood in for, not {properties}")
    targets = json.loads(os.environ.get(TARGETS_ENV, "{}"))
    key = f"{request['Target']}:{properties.get('host') or 'localhost'}:{properties['portNumber']}"
    if key not in targets:
        return _fail(f"nothing listens on {key} (set {TARGETS_ENV})")
    host, _, port = targets[key].rpartition(":")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(properties.get("localPortNumber") or 0)))
    listener.listen()
    session_id = response["SessionId"]
    print(f"\nStarting session with SessionId: {session_id}", flush=True)
    print(
        f"Port {listener.getsockname()[1]} opened for sessionId {session_id}.\nWaiting for connections...",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _serve(listener, (host, int(port)), session_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
