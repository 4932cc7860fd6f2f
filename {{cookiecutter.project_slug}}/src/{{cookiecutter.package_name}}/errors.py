"""Errors a user can act on. The CLI prints their message without a traceback and exits non-zero."""


class DataError(ValueError):
    """The data source is missing, empty or holds something that is not a usable image."""


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
