"""TEMPORARY local-only stand-in (lead's dev shim; replaced by helper S's module at merge)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend


class WaveAlreadyClaimed(RuntimeError):
    pass


def open_study_storage(uri: str) -> optuna.storages.JournalStorage:
    Path(uri).mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(Path(uri) / "journal.log")))


def claim_wave(uri: str, wave: int, body: dict) -> None:
    path = Path(uri) / "waves" / f"{wave}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        raise WaveAlreadyClaimed(f"wave {wave} already claimed ({path})") from None
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)


def latest_wave(uri: str) -> int:
    d = Path(uri) / "waves"
    return max((int(p.stem) for p in d.glob("*.json")), default=0) if d.exists() else 0
