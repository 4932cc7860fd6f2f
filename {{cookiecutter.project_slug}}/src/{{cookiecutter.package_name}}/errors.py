"""Errors a user can act on. The CLI prints their message without a traceback and exits non-zero."""

import json


class DataError(ValueError):
    """The data source is missing, empty or holds something that is not a usable image."""


class DistributedError(ValueError):
    """The multi-worker environment (TF_CONFIG, AWS Batch's multi-node variables, the MNP_* settings) is missing,
    inconsistent, or the nodes could not find each other (distributed.py, rendezvous.py)."""


class FilesChanged(ValueError):
    """A model's files are not the ones promote recorded (model_files.verify): `path` changed, is missing, or was
    added. The caller words the message with its own fix."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path} {what}")
        self.path, self.what = path, what


class ExportError(RuntimeError):
    """An exported model does not behave like the trained Keras model."""


# EX_TEMPFAIL: try again. The workflow's stop job re-dispatches the training when the train step exits with it.
EXIT_INTERRUPTED = 75
# EX_CONFIG: the GPU preflight found no GPU TensorFlow can use (gpu_preflight.py); the job stops before training.
EXIT_NO_GPU = 78


class NoGpuError(RuntimeError):
    """On the GPU runner TensorFlow sees no GPU and CPU training was not allowed (exit status EXIT_NO_GPU)."""


class TrainingInterrupted(RuntimeError):
    """EC2 is taking the instance back; the last checkpoint is in S3 and the next attempt resumes from it."""

    def __init__(self, detail: dict, epochs_done: int) -> None:
        super().__init__(
            f"spot interruption notice ({detail.get('action', 'terminate')} at {detail.get('time', '?')}): "
            f"stopped after checkpointing; {epochs_done} epoch(s) done"
        )
        self.detail, self.epochs_done = detail, epochs_done


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
