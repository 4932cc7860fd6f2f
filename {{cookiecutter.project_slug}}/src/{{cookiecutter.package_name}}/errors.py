"""Errors a user can act on. The CLI prints their message without a traceback and exits non-zero."""

# The job library's errors (the platform's gpu_job), raised by the project's data code too: the CLI reports them
# with the project's own. DataError: a data source is missing, empty or holds something that is not a usable
# image. EXIT_NO_GPU (78): the GPU preflight found no GPU TensorFlow can use; the job stops before training.
# EC2 is taking the instance back (callbacks.StopOnInterruption raises it after the checkpoint); the CLI exits
# EXIT_INTERRUPTED (75, EX_TEMPFAIL), on which the stop job starts the next attempt.
from gpu_job.errors import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from gpu_job.errors import EXIT_NO_GPU as EXIT_NO_GPU
from gpu_job.errors import DataError as DataError
from gpu_job.errors import DistributedError as DistributedError

# A model's files are not the ones promote recorded (gpu_job.manifest.verify); the caller words the fix.
from gpu_job.errors import FilesChanged as FilesChanged

# A value a workflow handed the job (a dispatch input, an environment variable) is not usable (gpu_job.job_contract).
from gpu_job.errors import JobInputError as JobInputError

# Bad input to `predict` (its --input, --output or --model), named with the fix (gpu_job.batch_io and predict).
from gpu_job.errors import PredictError as PredictError

# A sweep's study storage (gpu_job.study_storage) cannot be used as given, or another plan job claimed the wave;
# configs/sweep.yaml, the study's space or the sweep's budget refuses the sweep (gpu_job.sweep).
from gpu_job.errors import StudyStorageError as StudyStorageError
from gpu_job.errors import SweepConfigError as SweepConfigError
from gpu_job.errors import TrainingInterrupted as TrainingInterrupted
from gpu_job.errors import WaveAlreadyClaimed as WaveAlreadyClaimed


class ExportError(RuntimeError):
    """An exported model does not behave like the trained Keras model."""


class NoGpuError(RuntimeError):
    """On the GPU runner TensorFlow sees no GPU and CPU training was not allowed (exit status EXIT_NO_GPU)."""
