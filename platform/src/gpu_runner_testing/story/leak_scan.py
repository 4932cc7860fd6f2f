"""The leak scanner of the e2e security stories: every form a secret can take in what a story leaves behind
(raw, percent-encoded, base64 at each alignment), and act's JSON log as GitHub's log would show it."""

from __future__ import annotations

import base64
import json
import os
import secrets
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from gpu_runner_testing.github_double import decode_jit_config

Hit = tuple[str, str]  # (where, secret name)


def random_key(prefix: str, length: int, alphabet: str) -> str:
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def _encoded_forms(value: str) -> Iterator[tuple[str, bytes]]:
    """The secret as stored bytes, and the bytes any base64 text of a blob holding it contains: whatever the
    secret's offset in the blob, one of the three alignments below encodes to a substring of that text."""
    raw = value.encode()
    yield "", raw
    quoted = urllib.parse.quote(value, safe="").encode()
    if quoted != raw:
        yield " (percent-encoded)", quoted
    for start in range(3):
        chunk = raw[start : start + (len(raw) - start) // 3 * 3]
        if len(chunk) >= 12:  # shorter fragments could match by chance
            yield " (base64)", base64.b64encode(chunk)
            yield " (base64url)", base64.urlsafe_b64encode(chunk)


def needles(named_secrets: Mapping[str, str]) -> list[tuple[str, bytes]]:
    """(secret name, bytes to look for) for every secret and every form it is searched in."""
    out: dict[bytes, str] = {}
    for name, value in named_secrets.items():
        if len(value) < 12:
            raise ValueError(f"{name}: too short to scan for without false hits")
        for form, pattern in _encoded_forms(value):
            out.setdefault(pattern, name + form)
    return [(name, pattern) for pattern, name in out.items()]


def scan_bytes(where: str, data: bytes, patterns: list[tuple[str, bytes]]) -> list[Hit]:
    return [(where, name) for name, pattern in patterns if pattern in data]


# act records each workflow command's argument, unmasked, next to its masked message. GitHub's log shows neither
# the argument of `add-mask` nor the lines written to GITHUB_ENV (act's `set-env`); their message stays in the
# view, so a value nobody masked is still found there.
_UNLOGGED_ARGUMENTS = ("add-mask", "set-env")


def workflow_log_view(path: Path, data: bytes) -> bytes:
    """An act JSON log (act-*.jsonl) as GitHub's log would show it; any other file unchanged."""
    if not (path.name.startswith("act-") and path.suffix == ".jsonl"):
        return data
    lines = []
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            lines.append(line)
            continue
        if isinstance(record, dict) and record.get("command") in _UNLOGGED_ARGUMENTS:
            record = {k: v for k, v in record.items() if k not in ("arg", "raw")}
        lines.append(json.dumps(record, ensure_ascii=False).encode())
    return b"\n".join(lines)


def scan_tree(
    root: Path, patterns: list[tuple[str, bytes]], view: Callable[[Path, bytes], bytes] = workflow_log_view
) -> list[Hit]:
    """Every regular file under `root`, as bytes, text or binary (act's logs as GitHub would show them).
    Symlinks are not followed: the story's point outside it (the aws CLI, the image's Python)."""
    hits: list[Hit] = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = Path(directory) / name
            if path.is_symlink() or not path.is_file():
                continue
            hits += scan_bytes(str(path.relative_to(root)), view(path, path.read_bytes()), patterns)
    return hits


def jit_config_secrets(name: str, encoded: str) -> dict[str, str]:
    """An encoded JIT config and the pieces that identify it after one or both base64 layers were decoded."""
    out = {f"JIT config {name}": encoded}
    for document, value in json.loads(base64.b64decode(encoded)).items():
        out[f"JIT config {name} {document}"] = value
    documents = decode_jit_config(encoded)
    out[f"JIT config {name} RSA key"] = documents[".credentials_rsaparams"]["d"]
    out[f"JIT config {name} client id"] = documents[".credentials"]["Data"]["clientId"]
    return out
