"""Settings of the GPU runner, from `configs/gpu-runner.yaml` with per-run overrides (CLI flags).

Unknown keys and bad values are rejected with the key named, like the training config.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gpu_runner.core.errors import SettingsError

# AWS publishes the current "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" id here.
DEFAULT_AMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)
# The GPU families the default AMI supports: "supported_ec2_instances" in AWS's release notes of the Deep Learning
# Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260130 (https://docs.aws.amazon.com/dlami/latest/devguide/
# aws-deep-learning-ami-gpubaseoss-ul2204-2026-02-03.html, read 2026-12-01): G4dn, G5, G6, Gr6, G6e, G7e, P4d,
# P4de, P5, P5e, P5en, P6-B200, P6-B300. P3 (V100) is not among them. hooks/pre_gen_project.py keeps a copy.
DLAMI_GPU_FAMILIES = (
    "g4dn", "g5", "g6", "gr6", "g6e", "g7e", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300",
)  # fmt: skip
INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9][a-z0-9-]*")
REGION = re.compile(r"[a-z]{2}(-gov)?-[a-z]+-\d")
SHA256 = re.compile(r"[0-9a-f]{64}")
# S3 bucket names: 3-63 lowercase letters, digits, dots and hyphens, a letter or digit at each end (Amazon S3 User
# Guide, "General purpose bucket naming rules", read 2026-12-01); no ".." either.
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
BRANCH_PREFIX = re.compile(r"[A-Za-z0-9._/-]+")
# A container image pinned by digest: <name>[:<tag>]@sha256:<64 hex>. A tag alone is mutable (whoever can push to
# the repository can point it at other bytes); the digest names exactly one manifest (OCI image spec,
# descriptor.md "Digests"). Name and tag characters after the OCI distribution spec's rules, lower-case names.
PINNED_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}")
# The only prefix of an S3 runner mirror: gpu_runner/setup/gpu-runner.yaml denies the runner role every write under it
# (DenyRunnerMirrorWrites), so code on one instance cannot swap the tarball the next instance boots.
# Where the train and sweep jobs run (issue 18): an ephemeral GitHub runner on EC2 (launch/wait/teardown), or a
# job on an AWS Batch queue that the workflow job submits, streams and waits for (batch_jobs.py, manual/batch-jobs.md).
BACKENDS = ("runner", "batch")
RUNNER_MIRROR = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/runner-mirror(/[A-Za-z0-9._/-]*)?")


@dataclass(frozen=True)
class Settings:
    project: str
    region: str
    instance_types: tuple[str, ...]
    use_spot: bool = True
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    instance_profile: str = ""
    ami_id: str = ""
    ami_parameter: str = DEFAULT_AMI_PARAMETER
    root_volume_gb: int = 100
    max_runtime_minutes: int = 180
    idle_timeout_minutes: int = 15
    ssm_prefix: str = "/gpu-runner"
    # The stack's bucket (data, checkpoints, exports): `gpu-runner bootstrap` creates it, the train job
    # checkpoints to s3://<bucket>/checkpoints (launch hands it on as the start job's `bucket` output).
    bucket: str = ""
    # Branches whose pushes may start GPU training: the train role trusts refs/heads/<prefix>*, and train.yml's
    # `on.push.branches` must be <prefix>** (GitHub reads triggers before any code runs, so it says it again).
    train_branch_prefix: str = "train/"
    # Branches whose pushes start a hyperparameter sweep (sweep.yml, one GPU runner per trial): the launch role
    # trusts refs/heads/<prefix>* too, the sweep role only those; sweep.yml's `on.push.branches` says it again.
    sweep_branch_prefix: str = "sweep/"
    # "" = host mode (nothing to pre-pull); else the train job's container image, pulled at boot (manual/gpu-runtime.md).
    image: str = ""
    runner_version: str = "latest"
    runner_sha256: str = ""
    runner_mirror: str = ""
    runner_user: str = "runner"
    wait_timeout_seconds: int = 600
    reap_grace_minutes: int = 20
    # Spot interruptions: attempts in all (the first included), and after how many interrupted attempts the
    # next one goes on-demand.
    max_attempts: int = 3
    on_demand_after_interruptions: int = 2
    # runner | batch (BACKENDS): how train.yml and sweep.yml get a GPU.
    backend: str = "runner"
    # At most this many of the repository's GPU instances live at once (launch refuses the next: live_limit.py);
    # None: no limit but the account's vCPU quota.
    max_live_instances: int | None = None

    def __post_init__(self) -> None:
        problems = list(_problems(self))
        if problems:
            raise SettingsError("invalid GPU runner settings:\n" + "\n".join(f"  {p}" for p in problems))


def _problems(s: Settings) -> list[str]:
    out: list[str] = []
    if s.backend not in BACKENDS:
        out.append(
            f"backend: {s.backend!r} is not one of {', '.join(BACKENDS)} (runner: an EC2 GPU runner per job; "
            "batch: a job on the AWS Batch queue, manual/batch-jobs.md)"
        )
    if not s.project:
        out.append("project: must not be empty")
    if not REGION.fullmatch(s.region):
        out.append(f"region: '{s.region}' is not an AWS region like eu-west-1")
    if not s.instance_types:
        out.append("instance_types: list at least one GPU instance type, e.g. [g4dn.xlarge]")
    out += [
        f"instance_types: '{t}' is not an instance type like g4dn.xlarge"
        for t in s.instance_types
        if not INSTANCE_TYPE.fullmatch(t)
    ]
    if not s.ami_id and s.ami_parameter == DEFAULT_AMI_PARAMETER:
        out += [
            f"instance_types: '{t}' is a GPU family the Deep Learning Base OSS Nvidia Driver AMI does not support "
            f"(it supports {', '.join(DLAMI_GPU_FAMILIES)}): use e.g. g4dn.xlarge or g5.xlarge, or set ami_id to "
            "an AMI that supports it"
            for t in s.instance_types
            if INSTANCE_TYPE.fullmatch(t) and unsupported_gpu_family(t)
        ]
    # reap_grace_minutes 0 would let the reaper delete a runner config a launch has just written.
    positive = ("root_volume_gb", "max_runtime_minutes", "idle_timeout_minutes", "wait_timeout_seconds",
                "reap_grace_minutes")  # fmt: skip
    for name in (*positive, "max_attempts", "on_demand_after_interruptions"):
        value = getattr(s, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            out.append(f"{name}: must be a positive integer (got {value!r})")
    limit = s.max_live_instances
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0):
        out.append(
            f"max_live_instances: must be a positive integer, or null for no limit (got {limit!r}); e.g. "
            "max_live_instances: 4 lets four GPU instances of this repository run at once"
        )
    both_ints = isinstance(s.idle_timeout_minutes, int) and isinstance(s.max_runtime_minutes, int)
    if both_ints and s.idle_timeout_minutes >= s.max_runtime_minutes:
        out.append(
            f"idle_timeout_minutes: must be shorter than max_runtime_minutes "
            f"(got {s.idle_timeout_minutes} >= {s.max_runtime_minutes})"
        )
    if s.ami_id and not re.fullmatch(r"ami-[0-9a-f]{8,17}", s.ami_id):
        out.append(f"ami_id: '{s.ami_id}' is not an AMI id like ami-0123456789abcdef0")
    if not s.ami_id and not s.ami_parameter.startswith("/"):
        out.append("ami_parameter: must be an SSM parameter path starting with '/' (or set ami_id)")
    if not s.ssm_prefix.startswith("/"):
        out.append(f"ssm_prefix: '{s.ssm_prefix}' must start with '/'")
    if s.bucket and (not BUCKET.fullmatch(s.bucket) or ".." in s.bucket):
        out.append(
            f"bucket: '{s.bucket}' is not a valid S3 bucket name (3-63 lowercase letters, digits, dots and dashes)"
        )
    if not BRANCH_PREFIX.fullmatch(s.train_branch_prefix):
        out.append(
            f"train_branch_prefix: '{s.train_branch_prefix}' may only hold letters, digits and . _ / - (e.g. train/)"
        )
    if not BRANCH_PREFIX.fullmatch(s.sweep_branch_prefix):
        out.append(
            f"sweep_branch_prefix: '{s.sweep_branch_prefix}' may only hold letters, digits and . _ / - (e.g. sweep/)"
        )
    elif prefixes_overlap(s.train_branch_prefix, s.sweep_branch_prefix):
        out.append(
            f"sweep_branch_prefix: '{s.sweep_branch_prefix}' overlaps train_branch_prefix "
            f"'{s.train_branch_prefix}' (one starts with the other), so one push would start both a training and "
            "a sweep; give it a prefix of its own (e.g. sweep/)"
        )
    if s.runner_version != "latest" and not re.fullmatch(r"\d+\.\d+\.\d+", s.runner_version):
        out.append(f"runner_version: '{s.runner_version}' must be 'latest' or a version like 2.330.0")
    if s.runner_sha256 and not SHA256.fullmatch(s.runner_sha256):
        out.append("runner_sha256: must be 64 lowercase hex characters")
    if s.runner_sha256 and s.runner_version == "latest":
        out.append("runner_sha256: a checksum needs a pinned runner_version")
    if s.runner_version != "latest" and not s.runner_sha256:
        # Fail closed: a download nothing can verify is never run (the boot script refuses it too).
        out.append(
            f"runner_sha256: a pinned runner_version ({s.runner_version}) needs its SHA-256, the value between "
            "<!-- BEGIN SHA linux-x64 --> and <!-- END SHA linux-x64 --> in the actions/runner release notes"
        )
    out += _mirror_problems(s)
    if s.image and not PINNED_IMAGE.fullmatch(s.image):
        out.append(
            f"image: '{s.image}' is not pinned by digest; use <name>:<tag>@sha256:<64 hex> (a tag can be moved "
            "to other bytes), e.g. the digest from `docker buildx imagetools inspect <name>:<tag>` or "
            "`crane digest <name>:<tag>`; or '' for host mode"
        )
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", s.runner_user):
        out.append(f"runner_user: '{s.runner_user}' is not a valid Linux user name")
    return out


def _mirror_problems(s: Settings) -> list[str]:
    if not s.runner_mirror:
        return []
    out = []
    if not RUNNER_MIRROR.fullmatch(s.runner_mirror.rstrip("/")):
        out.append(
            f"runner_mirror: '{s.runner_mirror}' must be s3://<bucket>/runner-mirror[/<path>] (the runner role "
            "cannot write under runner-mirror/)"
        )
    if s.runner_version == "latest" or not s.runner_sha256:
        out.append(
            "runner_mirror: needs a pinned runner_version and its runner_sha256 (a mirror proves nothing)"
        )
    return out


def prefixes_overlap(first: str, second: str) -> bool:
    """Some branch name starts with both prefixes exactly when one of them starts with the other."""
    return first.startswith(second) or second.startswith(first)


def unsupported_gpu_family(instance_type: str) -> bool:
    """A GPU type (g*/p* family) outside the default AMI's supported families; CPU types are not judged here."""
    family = instance_type.split(".", 1)[0]
    return family.startswith(("g", "p")) and family not in DLAMI_GPU_FAMILIES


_TUPLE_FIELDS = {"instance_types", "subnet_ids", "security_group_ids"}


def _coerce(name: str, value: Any) -> Any:
    if name in _TUPLE_FIELDS:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        if isinstance(value, list | tuple):
            return tuple(str(item) for item in value)
        raise SettingsError(f"{name}: must be a list or a comma-separated string (got {value!r})")
    return value


def settings_from_mapping(raw: Mapping[str, Any], source: str = "<settings>") -> Settings:
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SettingsError(
            f"{source}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}"
        )
    missing = sorted(
        f.name for f in fields(Settings) if f.default is dataclasses.MISSING and f.name not in raw
    )
    if missing:
        raise SettingsError(f"{source}: missing required key(s) {', '.join(missing)}")
    try:
        return Settings(**{name: _coerce(name, value) for name, value in raw.items()})
    except SettingsError as error:
        raise SettingsError(f"{source}: {error}") from None


def load_settings(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Read the YAML file, apply non-empty overrides (CLI flags, workflow inputs), validate."""
    import yaml  # here, not at the top: the reaper Lambda (reaper_lambda) builds Settings without PyYAML

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise SettingsError(
            f"{path}: settings file not found (pass --settings configs/gpu-runner.yaml)"
        ) from None
    except yaml.YAMLError as error:
        raise SettingsError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{path}: top level must be a mapping of settings")
    merged = {**raw, **{k: v for k, v in (overrides or {}).items() if v not in (None, "")}}
    return settings_from_mapping(merged, str(path))
