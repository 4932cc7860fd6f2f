"""The reaper Lambda's deployment package: this package's own files in a zip, uploaded to the stack's bucket.

Not inline in the template (`Code.ZipFile`): an inline function is one file (CloudFormation writes it as index.py),
and the package is tens of files; it was also limited to 4,096 characters until 2022 (aws-cdk PR #20624) and a
template sent as TemplateBody may hold at most 51,200 bytes (CloudFormation API Reference, CreateStack and
UpdateStack `TemplateBody`). So the zip goes to S3 under a key named by its SHA-256, and the template pins the object version: CloudFormation only redeploys code when key or
version change ("Changes to a deployment package in Amazon S3 ... are not detected automatically during stack
updates", AWS::Lambda::Function Code, CloudFormation Template Reference, read 2026-12-01), and a pinned version
cannot be swapped by whoever may write to the bucket later. The zip is deterministic (fixed times, sorted names),
so an unchanged package keeps its key and a re-run of bootstrap changes nothing.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

KEY_PREFIX = "gpu-runner/reaper-lambda/"
HANDLER = "gpu_runner.ec2_runner.reaper_lambda.handler"
# The earliest time a zip entry can hold (DOS date): the same bytes on every build.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # gpu_runner/, above setup/


@dataclass(frozen=True)
class UploadedCode:
    key: str
    version: str  # "" when the bucket is not versioned (moto's CloudFormation skips VersioningConfiguration)
    sha256: str  # base64, as Lambda reports CodeSha256


def build_zip(package_dir: Path = _PACKAGE_DIR) -> bytes:
    """Every file of the gpu_runner package (no bytecode caches) under gpu_runner/, byte-for-byte reproducible."""
    files = sorted(
        p
        for p in package_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            info = zipfile.ZipInfo(f"gpu_runner/{path.relative_to(package_dir).as_posix()}", _FIXED_TIME)
            info.external_attr = 0o644 << 16  # readable by the Lambda runtime's user
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def code_sha256(data: bytes) -> str:
    """Lambda's CodeSha256 form: the base64 of the package's SHA-256 digest (GetFunction's Configuration)."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def code_key(data: bytes) -> str:
    return f"{KEY_PREFIX}{hashlib.sha256(data).hexdigest()}.zip"


def upload(s3: Any, bucket: str, data: bytes) -> UploadedCode:
    """Put the zip under its content key, or reuse the current version there when it holds exactly these bytes
    (an unchanged package must not make a new version, or every bootstrap would update the stack)."""
    key = code_key(data)
    try:
        current = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in {"NoSuchKey", "404"}:
            raise
    else:
        if current["Body"].read() == data:
            return UploadedCode(key, _version(current), code_sha256(data))
    reply = s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/zip")
    return UploadedCode(key, _version(reply), code_sha256(data))


def _version(reply: dict[str, Any]) -> str:
    version = str(reply.get("VersionId") or "")
    return "" if version == "null" else version  # S3 answers "null" for objects of an unversioned bucket
