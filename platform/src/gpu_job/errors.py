"""Errors a user can act on, raised by the job library; a project's CLI prints their message without a traceback
(the generated project's errors.py re-exports them beside its own)."""

import json


class JobInputError(ValueError):
    """A value a workflow handed the job (a dispatch input, an environment variable it sets) is not usable: the
    message names the value and the fix (job_contract.check)."""


class DataError(ValueError):
    """The data source is missing, empty or holds something that is not usable (an S3 prefix, a checkpoint)."""


class DistributedError(ValueError):
    """The multi-worker environment (TF_CONFIG, AWS Batch's multi-node variables, the MNP_* settings) is missing,
    inconsistent, or the nodes could not find each other (distributed.py, rendezvous.py)."""


class FilesChanged(ValueError):
    """A model's files are not the ones promote recorded (manifest.verify): `path` changed, is missing, or was
    added. The caller words the message with its own fix."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path} {what}")
        self.path, self.what = path, what


# EX_CONFIG: the GPU preflight found no GPU TensorFlow can use (gpu_preflight.py); the job stops before training.
EXIT_NO_GPU = 78


# EX_TEMPFAIL: try again. The workflow's stop job starts the next attempt when the train step exits with it.
EXIT_INTERRUPTED = 75


class TrainingInterrupted(RuntimeError):
    """EC2 is taking the instance back; the last checkpoint is in S3 and the next attempt resumes from it. A
    project's training raises it (a sweep trial is then left for the next wave: sweep.trial)."""

    def __init__(self, detail: dict, epochs_done: int) -> None:
        super().__init__(
            f"spot interruption notice ({detail.get('action', 'terminate')} at {detail.get('time', '?')}): "
            f"stopped after checkpointing; {epochs_done} epoch(s) done"
        )
        self.detail, self.epochs_done = detail, epochs_done


class SweepConfigError(ValueError):
    """A sweep cannot go on as configured: configs/sweep.yaml is missing or has an invalid field, its space
    changed since the study began, its budget is spent, or another plan job went first. The message names the
    field and the fix."""


class PredictError(ValueError):
    """Bad input to a project's batch prediction (batch_io, and the project's own checks): the message names the
    option (--input, --output, --model) and the fix."""


class StudyStorageError(ValueError):
    """A sweep's study storage cannot be used as given: a bad URI, a missing bucket, no permission, a broken
    journal. The message names the value and the fix."""


class WaveAlreadyClaimed(StudyStorageError):
    """Another plan job claimed this wave of the study first (study_storage.claim_wave)."""

    def __init__(self, uri: str, wave: int, claim: str, existing: dict | None) -> None:
        shown = json.dumps(existing, sort_keys=True)[:300] if existing is not None else "unreadable"
        super().__init__(
            f"wave {wave} of the study at '{uri}' is already claimed ({claim}: {shown}): another plan job is "
            f"planning it. Wait for that plan job to finish, or plan the next wave (latest_wave() + 1, at least {wave + 1}) instead"
        )
        self.uri, self.wave, self.claim, self.existing = uri, wave, claim, existing
