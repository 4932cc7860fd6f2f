"""Where a sweep's Optuna study lives: an S3 prefix shared by every job of the sweep, or a local directory.

The plan job (asks trials), each trial's training job on its GPU runner (reports a value per epoch for the
pruner, tells its result) and the collect job read and write the same study at the same time, from different
machines. Optuna's JournalStorage needs only an append-only log that several processes can share
(BaseJournalBackend: "must guarantee process safety"); S3 gives one with conditional writes:
- every `append_logs` call writes ONE new immutable object `journal/<first log number, 12 digits>.jsonl` with
  PutObject `IfNoneMatch="*"`, so exactly one writer gets each log number. S3 answers a second writer of the same
  key `412 PreconditionFailed` and a write racing another conditional write of that key may get
  `409 ConditionalRequestConflict` ("retry the upload"). Sources: Amazon S3 User Guide, "How to prevent object
  overwrites with conditional writes" (which also requires SigV4, boto3's default for S3); the PutObject API
  reference; botocore 1.44.8's s3 model (data/s3/2006-03-01/service-2.json.gz, PutObjectRequest member
  `IfNoneMatch`, header If-None-Match, "Expects the '*' (asterisk) character").
- the key is the first log number ALONE: two writers that both saw the journal end at log N both try key N; with
  N+count in the key, writers of different counts would both succeed and the journal would fork.
- S3 is strongly consistent (read-after-write for GET and LIST, "Amazon S3 data consistency model"), so after a
  refusal the loser reads the winner's object and retries at the new end.
- no snapshots (Optuna's BaseJournalSnapshot): JournalStorage pickles them, and unpickling an object from the
  bucket would run code written by anyone who may write the prefix (a training job) in the plan job. A fresh
  process replays the whole journal instead, fetching its objects in parallel.

Hand-written: no maintained Optuna S3 journal backend exists (optuna/optuna PR #6003 "Add JournalS3Backend" was
closed unmerged in 2025, the maintainers advising a third-party package; PyPI's package list, searched
2026-12-02, holds none: its only third-party Optuna storage is optuna-firestore-storage 0.6.0, 2019, Firestore).

The wave claim (`claim_wave`) is the version check of the plan job: the first plan job to create
`waves/<wave>.json` owns that wave; a second one gets WaveAlreadyClaimed instead of overwriting its trials.
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend

from .errors import StudyStorageError, WaveAlreadyClaimed

__all__ = [
    "JOURNAL_FILE",
    "S3JournalBackend",
    "StudyLocation",
    "StudyStorageError",
    "StudyUri",
    "WaveAlreadyClaimed",
    "claim_wave",
    "latest_wave",
    "open_study_storage",
    "parse_study_uri",
    "read_wave",
]

JOURNAL_FILE = "journal.log"  # a local study: Optuna's own JournalFileBackend writes <dir>/journal.log
JOURNAL_DIR = "journal/"
WAVES_DIR = "waves/"
# 12 digits: keys sort numerically as strings (ListObjectsV2 lists "in ascending order based on the key name",
# its API reference), so `StartAfter` can resume a listing at the last object we read.
KEY_DIGITS = 12
# Appends lost to other writers before giving up (each loss means another writer's log landed: progress).
DEFAULT_ATTEMPTS = 100
# Parallel GetObject calls when replaying a journal; botocore's default connection pool holds 10 per client.
FETCH_THREADS = 10
# A general purpose bucket name: 3-63 characters, lower-case letters, digits, dots and hyphens, beginning and
# ending with a letter or digit, no two adjacent dots (S3 User Guide, "General purpose bucket naming rules").
_BUCKET = re.compile(r"^(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_JOURNAL_KEY = re.compile(r"^(\d+)\.jsonl$")  # and KEY_DIGITS long
_WAVE_KEY = re.compile(r"^(\d+)\.json$")
# Codes S3 answers a conditional PutObject with when the key exists (412) or another conditional write of it is
# in flight (409): PutObject API reference, "IfNoneMatch".
_TAKEN = {"PreconditionFailed", "412"}
_CONFLICT = {"ConditionalRequestConflict", "409"}
# The IAM action each call needs (Service Authorization Reference, "Actions defined by Amazon S3"), for the
# access-denied message.
_IAM_ACTION = {"ListObjectsV2": "s3:ListBucket", "GetObject": "s3:GetObject", "PutObject": "s3:PutObject"}
# A study's location: "s3://bucket/prefix/" or a local directory (a str or a Path).
StudyUri = str | os.PathLike[str]
_URI_HELP = (
    "use s3://<bucket>/sweeps/<study>/ (the project's bucket) or a local directory such as sweeps/<study>"
)


@dataclass(frozen=True)
class StudyLocation:
    """A parsed study URI: `bucket` and `prefix` (ends with "/") for S3, else `path` (a local directory)."""

    uri: str
    bucket: str | None = None
    prefix: str = ""
    path: Path | None = None

    @property
    def is_s3(self) -> bool:
        return self.bucket is not None

    def s3_uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def parse_study_uri(uri: StudyUri) -> StudyLocation:
    """`s3://bucket/prefix/` or a local path; anything else is refused with the value and the fix."""
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri.strip():
        raise StudyStorageError(f"study storage {uri!r} is empty: {_URI_HELP}")
    scheme = _SCHEME.match(uri)
    if scheme is None:
        path = Path(uri).expanduser()
        if path.exists() and not path.is_dir():
            raise StudyStorageError(
                f"study storage '{uri}' is a file, not a directory: give the directory that holds "
                f"{JOURNAL_FILE} (it is created when missing)"
            )
        return StudyLocation(uri=uri, path=path)
    if scheme.group(1) != "s3":
        hint = " (the scheme is lower-case: s3://)" if scheme.group(1).lower() == "s3" else ""
        raise StudyStorageError(
            f"study storage '{uri}' is neither s3://bucket/prefix nor a local path{hint}: {_URI_HELP}"
        )
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not _BUCKET.match(bucket):
        raise StudyStorageError(
            f"study storage '{uri}': '{bucket}' is not a valid S3 bucket name (3-63 characters: lower-case "
            f"letters, digits, dots, hyphens): {_URI_HELP}"
        )
    if not prefix.strip("/"):
        raise StudyStorageError(
            f"study storage '{uri}' has no prefix: a study needs its own folder in the bucket, {_URI_HELP}"
        )
    if "//" in prefix.rstrip("/") or prefix.startswith("/"):
        raise StudyStorageError(f"study storage '{uri}' has an empty folder name ('//'): {_URI_HELP}")
    return StudyLocation(uri=uri, bucket=bucket, prefix=prefix.rstrip("/") + "/")


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _status(error: ClientError) -> str:
    return str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _is(error: ClientError, codes: set[str]) -> bool:
    return _code(error) in codes or _status(error) in codes


def _s3_error(error: ClientError, where: StudyLocation, operation: str) -> Exception:
    """A StudyStorageError for the failures a user fixes (no bucket, no permission); any other as it is."""
    code = _code(error)
    if code == "NoSuchBucket":
        return StudyStorageError(
            f"study storage '{where.uri}': bucket '{where.bucket}' does not exist; fix the bucket name in the "
            f"URI or create the bucket (the gpu-runner stack makes it: make bootstrap)"
        )
    if code in {"AccessDenied", "AllAccessDisabled"} or _status(error) == "403":
        action = _IAM_ACTION.get(operation, f"s3:{operation}")
        return StudyStorageError(
            f"study storage '{where.uri}': access denied to {operation}; grant {action} on "
            f"arn:aws:s3:::{where.bucket}/{where.prefix}* (s3:ListBucket: on arn:aws:s3:::{where.bucket}) "
            f"to this job's role, or fix the bucket name"
        )
    return error


def _list_keys(client: Any, where: StudyLocation, folder: str, start_after: str = "") -> list[str]:
    """Every key under `<prefix><folder>` after `start_after`, in key order, across pages.

    ListObjectsV2 "returns some or all (up to 1,000) of the objects in a bucket" per call (its API reference):
    the paginator follows NextContinuationToken.
    """
    params: dict[str, Any] = {"Bucket": where.bucket, "Prefix": where.prefix + folder}
    if start_after:
        params["StartAfter"] = start_after
    try:
        return [
            obj["Key"]
            for page in client.get_paginator("list_objects_v2").paginate(**params)
            for obj in page.get("Contents", [])
        ]
    except ClientError as error:
        raise _s3_error(error, where, "ListObjectsV2") from None


def _get(client: Any, where: StudyLocation, key: str) -> dict[str, Any] | None:
    """GetObject's answer with its body read, or None when the key does not exist."""
    try:
        answer = client.get_object(Bucket=where.bucket, Key=key)
    except ClientError as error:
        if _code(error) in {"NoSuchKey", "404"}:
            return None
        raise _s3_error(error, where, "GetObject") from None
    answer["Body"] = answer["Body"].read()
    return answer


def _put_if_absent(client: Any, where: StudyLocation, key: str, body: bytes, **extra: Any) -> bool:
    """PutObject only if the key does not exist yet: False when another writer has it (412) or is writing it
    (409, after it persisted through a few retries)."""
    for attempt in range(5):
        try:
            client.put_object(Bucket=where.bucket, Key=key, Body=body, IfNoneMatch="*", **extra)
            return True
        except ClientError as error:
            if _is(error, _TAKEN):
                return False
            if not _is(error, _CONFLICT):
                raise _s3_error(error, where, "PutObject") from None
            # 409: "On a 409 failure you should retry the upload" (PutObject API reference, IfNoneMatch).
            time.sleep(random.uniform(0, 0.02 * 2**attempt))
    return False


class S3JournalBackend(BaseJournalBackend):
    """Optuna's journal as immutable S3 objects, one per `append_logs` call (see the module docstring).

    Objects are immutable, so each is read once and kept (as its JSON lines) in memory; a later `read_logs` lists
    only the keys after the last one read (`StartAfter`) and fetches only those.
    """

    def __init__(
        self, uri: StudyUri, *, client: Any | None = None, max_attempts: int = DEFAULT_ATTEMPTS
    ) -> None:
        self._where = parse_study_uri(uri)
        if not self._where.is_s3:
            raise StudyStorageError(
                f"S3JournalBackend needs an s3:// URI, not '{uri}': use open_study_storage() for a local path"
            )
        if max_attempts < 1:
            raise StudyStorageError(f"max_attempts={max_attempts} must be at least 1")
        self._client = client or boto3.client("s3")
        self._max_attempts = max_attempts
        self._lock = threading.Lock()
        self._lines: list[str] = []  # index = log number: the JSON text of every log read so far
        self._writers: dict[int, str] = {}  # first log number -> write id of the object that starts there
        self._last_key = ""

    @property
    def uri(self) -> str:
        return self._where.uri

    def __getstate__(self) -> dict[str, Any]:
        # A boto3 client cannot be pickled (Optuna pickles storages for worker processes): make a new one there.
        state = self.__dict__.copy()
        del state["_client"], state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client = boto3.client("s3")
        self._lock = threading.Lock()

    def key(self, log_number: int) -> str:
        """The object that holds the logs appended from `log_number` on."""
        if not 0 <= log_number < 10**KEY_DIGITS:
            raise StudyStorageError(f"log number {log_number} does not fit the journal's {KEY_DIGITS} digits")
        return f"{self._where.prefix}{JOURNAL_DIR}{log_number:0{KEY_DIGITS}d}.jsonl"

    def read_logs(self, log_number_from: int) -> list[dict[str, Any]]:
        with self._lock:
            self._refresh()
            lines = self._lines[log_number_from:]
        # Parsed anew on every read: Optuna keeps (and later updates) dicts from the logs it replays.
        return [json.loads(line) for line in lines]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if not logs:
            return
        lines = [json.dumps(log, separators=(",", ":")) for log in logs]
        body = ("\n".join(lines) + "\n").encode("utf-8")
        # Recognises our own object when a PutObject that landed is answered 412 on botocore's retry of it
        # (its first answer lost on the way back): without it the logs would be written twice.
        write_id = uuid.uuid4().hex
        with self._lock:
            for _ in range(self._max_attempts):
                first = len(self._lines)
                key = self.key(first)
                metadata = {"write-id": write_id}
                if _put_if_absent(
                    self._client,
                    self._where,
                    key,
                    body,
                    Metadata=metadata,
                    ContentType="application/x-ndjson",
                ):
                    self._remember(key, first, lines, write_id)
                    return
                # Someone else has log `first`. Catch up by walking the journal object by object from there
                # (GetObject is strongly consistent and one request per object, where a re-list costs two
                # before the first object: with re-lists, a writer in a tight loop won every round in a
                # 3-process test and the others never wrote), then try at the new end.
                if not self._take_next():
                    self._refresh()  # 409: the other write is still in flight, or gone; see what is there
                while self._writers.get(first) != write_id and self._take_next():
                    pass
                if self._writers.get(first) == write_id:
                    return
        raise StudyStorageError(
            f"study storage '{self.uri}': {self._max_attempts} attempts to append to the journal were all "
            f"taken by other writers (last tried {key}); run fewer writers at once or raise max_attempts"
        )

    def _remember(self, key: str, first: int, lines: list[str], write_id: str) -> None:
        self._lines.extend(lines)
        self._writers[first] = write_id
        self._last_key = key

    def _fetch(self, keys: list[str]) -> list[dict[str, Any] | None]:
        """GetObject of each key, in order; many at once when a fresh process replays a long journal (a study of
        40 trials x 20 epochs is ~1,000 objects: one after another at S3's ~20 ms first-byte latency, 20 s)."""
        if len(keys) < 2:
            return [_get(self._client, self._where, key) for key in keys]
        with ThreadPoolExecutor(min(FETCH_THREADS, len(keys))) as pool:
            return list(pool.map(lambda key: _get(self._client, self._where, key), keys))

    def _take_next(self) -> bool:
        """Read the object that continues the journal, if it exists: one GetObject, no listing."""
        key = self.key(len(self._lines))
        answer = _get(self._client, self._where, key)
        if answer is not None:
            self._take(key, answer)
        return answer is not None

    def _refresh(self) -> None:
        """Read every journal object after the last one read, checking that they continue the journal."""
        # A key ending in "/" is a folder placeholder (the S3 console's "Create folder"), never a journal object.
        keys = [
            k
            for k in _list_keys(self._client, self._where, JOURNAL_DIR, self._last_key)
            if not k.endswith("/")
        ]
        for key, answer in zip(keys, self._fetch(keys), strict=True):
            where = self._where.s3_uri(key)
            if answer is None:
                raise StudyStorageError(
                    f"study storage '{self.uri}': {where} was listed but is gone: journal objects must never "
                    f"be deleted (a lifecycle rule on the prefix?); restore it or start a new study"
                )
            self._take(key, answer)

    def _take(self, key: str, answer: dict[str, Any]) -> None:
        """Check that the object at `key` continues the journal and keep its logs."""
        where = self._where.s3_uri(key)
        match = _JOURNAL_KEY.match(key[len(self._where.prefix + JOURNAL_DIR) :])
        if match is None or len(match.group(1)) != KEY_DIGITS:
            raise StudyStorageError(
                f"study storage '{self.uri}': {where} is not a journal object (<{KEY_DIGITS} digits>.jsonl); "
                f"only this module writes under {JOURNAL_DIR}: move it elsewhere"
            )
        first = int(match.group(1))
        if first != len(self._lines):
            raise StudyStorageError(
                f"study storage '{self.uri}': {where} starts at log {first} but the journal before it ends "
                f"at log {len(self._lines)}: an object was deleted or written by hand; restore it from a "
                f"bucket version, or start a new study"
            )
        try:
            lines = answer["Body"].decode("utf-8").splitlines()
            if not lines or not all(isinstance(json.loads(line), dict) for line in lines):
                raise ValueError("not one JSON object per line")
        except ValueError as error:
            raise StudyStorageError(
                f"study storage '{self.uri}': {where} is not a journal object ({error}); restore it from "
                f"a bucket version or start a new study"
            ) from None
        self._remember(key, first, lines, answer.get("Metadata", {}).get("write-id", ""))


def open_study_storage(uri: StudyUri, *, client: Any | None = None) -> JournalStorage:
    """The JournalStorage of the study at `uri`: S3 (S3JournalBackend) or a local directory (Optuna's
    JournalFileBackend at <dir>/journal.log, for `make sweep` on one machine; the directory is created)."""
    where = parse_study_uri(uri)
    if where.is_s3:
        return JournalStorage(S3JournalBackend(uri, client=client))
    assert where.path is not None
    where.path.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(where.path / JOURNAL_FILE)))


def _check_wave(wave: int) -> None:
    if isinstance(wave, bool) or not isinstance(wave, int) or wave < 1:
        raise StudyStorageError(
            f"wave {wave!r} is not a wave number: waves count 1, 2, ... (latest_wave() + 1)"
        )


def _wave_key(where: StudyLocation, wave: int) -> str:
    return f"{where.prefix}{WAVES_DIR}{wave}.json"


def claim_wave(uri: StudyUri, wave: int, body: dict[str, Any], *, client: Any | None = None) -> None:
    """Create `waves/<wave>.json` holding `body`, or raise WaveAlreadyClaimed when another plan job has it.

    S3: PutObject IfNoneMatch="*". Locally: the claim is written to a temporary file and linked to its name
    (link(2) fails with EEXIST like O_CREAT|O_EXCL, and a reader never sees a half-written claim).
    """
    _check_wave(wave)
    if not isinstance(body, dict):
        raise StudyStorageError(f"the claim of wave {wave} must be a JSON object, not {type(body).__name__}")
    try:
        data = json.dumps(body, sort_keys=True).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise StudyStorageError(
            f"the claim of wave {wave} is not JSON ({error}): pass plain values"
        ) from None
    where = parse_study_uri(uri)
    if where.is_s3:
        _claim_s3(client or boto3.client("s3"), where, wave, data)
        return
    assert where.path is not None
    folder = where.path / WAVES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{wave}.json"
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".claim-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, target)
            return
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)
    raise WaveAlreadyClaimed(where.uri, wave, str(target), read_wave(where.uri, wave))


def _claim_s3(client: Any, where: StudyLocation, wave: int, data: bytes) -> None:
    key = _wave_key(where, wave)
    # As in append_logs: a claim that landed but whose answer was lost is answered 412 on botocore's retry;
    # the id tells our own claim from another plan job's.
    claim_id = uuid.uuid4().hex
    for _ in range(3):
        if _put_if_absent(
            client, where, key, data, Metadata={"claim-id": claim_id}, ContentType="application/json"
        ):
            return
        answer = _get(client, where, key)
        if answer is None:
            continue  # 409s all along and the other write did not land: try again
        if answer.get("Metadata", {}).get("claim-id") == claim_id:
            return
        raise WaveAlreadyClaimed(
            where.uri, wave, where.s3_uri(key), _claim_body(answer["Body"], where.s3_uri(key))
        )
    raise StudyStorageError(
        f"wave {wave} of the study at '{where.uri}': S3 kept answering 409 ConditionalRequestConflict for "
        f"{where.s3_uri(key)} and no claim landed; run the plan job again"
    )


def _claim_body(raw: bytes, shown: str) -> dict[str, Any]:
    try:
        claim = json.loads(raw)
    except ValueError:
        claim = None
    if not isinstance(claim, dict):
        raise StudyStorageError(f"wave claim {shown} is not a JSON object: delete it and plan the wave again")
    return claim


def read_wave(uri: StudyUri, wave: int, *, client: Any | None = None) -> dict[str, Any] | None:
    """The claim of `wave`, or None when no plan job has claimed it."""
    _check_wave(wave)
    where = parse_study_uri(uri)
    if where.is_s3:
        key = _wave_key(where, wave)
        answer = _get(client or boto3.client("s3"), where, key)
        if answer is None:
            return None
        raw, shown = answer["Body"], where.s3_uri(key)
    else:
        assert where.path is not None
        path = where.path / WAVES_DIR / f"{wave}.json"
        if not path.exists():
            return None
        raw, shown = path.read_bytes(), str(path)
    return _claim_body(raw, shown)


def latest_wave(uri: StudyUri, *, client: Any | None = None) -> int:
    """The highest claimed wave number, 0 when none was claimed."""
    where = parse_study_uri(uri)
    if where.is_s3:
        folder = where.prefix + WAVES_DIR
        names = [key[len(folder) :] for key in _list_keys(client or boto3.client("s3"), where, WAVES_DIR)]
    else:
        assert where.path is not None
        folder_path = where.path / WAVES_DIR
        names = [p.name for p in folder_path.iterdir()] if folder_path.is_dir() else []
    waves = [int(m.group(1)) for m in map(_WAVE_KEY.match, names) if m]
    return max(waves, default=0)
