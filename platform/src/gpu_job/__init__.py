"""gpu_job: what a project's code calls inside its jobs, written once for every project (the `job` and `sweep`
extras).

The generated project's package holds what a team edits (model, data, training loop, config) and calls this
library for what no team would edit:

- `gpu_preflight.probe`, `Report`, `TfBoundary`: before a paid GPU trains, TensorFlow must list a GPU and run an
  op on it (exit status `errors.EXIT_NO_GPU` otherwise);
- `env_check.check(lock)`: this interpreter's Python, TensorFlow, Keras, NumPy and protobuf against the project's
  uv.lock;
- `interruption.InterruptionWatcher`, `should_watch`: spot interruption notices from IMDSv2, watched in a thread;
- `checkpoints.open_store`, `S3Checkpoints`, `config_hash`: Keras backups mirrored to S3 under the training
  role's own session, restored from the sessions the launch code recorded;
- `s3sync.sync_prefix`, `parse_s3_uri`: an S3 prefix mirrored to local disk;
- `batch_io.list_keys`, `source_for`, `sink_for`, `check_writable`: a batch job's inputs and outputs on a folder or
  S3 (listed, read in parallel with a size cap, written whole, the manifest created once);
- `batch_predict.run`, `Model`, `Reader`, `Summary`: batch prediction's engine, a project's model over its inputs
  as Parquet shards, resumable, one batch per output (the `predict` extra: PyArrow, tqdm);
- `batch_tracking.inference_run`, `log_summary`, `job_summary`: a batch prediction's MLflow run and job summary;
- `distributed.cluster_from_env` and `rendezvous`: the multi-worker cluster of an explicit TF_CONFIG or an AWS
  Batch multi-node job;
- `sweep` (the `sweep` extra: Optuna, pydantic, matplotlib): a project's hyperparameter sweep, given a
  `sweep.project.SweepProject` (its training config, its `SearchRules`, its training function): the sweep file
  checked against the training config (`sweep.space`), the waves (`sweep.commands.plan`, `trial`, `collect`,
  `local`), the study, the parent and child runs;
- `train_hooks.TrainHooks`: what a caller (a sweep trial) adds to one training of the project, framework-free;
- `config_files.read_yaml_mapping`, `field_lines`: a project's YAML configs, with errors that name the field;
- `study_storage.open_study_storage`, `claim_wave`, `latest_wave`: a sweep's Optuna study in an S3 prefix (an
  append-only journal of conditional writes) or a local directory, and the plan job's claim of a wave;
- `sweep_array.parse_trials`, `trial_of_child`: which trial a Batch array child of a sweep's wave trains;
- `job_contract.check`, `attempt`, `write_step_output`, `append_job_summary` and the names of what passes between
  the workflows and a job (the variables the GPU job sets, the step outputs the project's commands write);
- `tracking.tracking_uri`, `run_tags`, `gpu_tags`, `tag_value`, `format_summary`, `job_summary`: a job's MLflow
  run as the workflows need it (the tags back to the commit, the workflow run and the hardware);
- `registry.decide`, `compare`, `log_decision`, `job_summary`, `ChampionRule`: the champion rule as a training sees
  it (read-only), and the decision promote words from its own figures;
- `manifest.manifest`, `digest`, `read_manifest`, `verify`: the served files' SHA-256s that promote records and
  predict checks before loading;
- `errors`: JobInputError, DataError, DistributedError, StudyStorageError, WaveAlreadyClaimed, FilesChanged,
  SweepConfigError, TrainingInterrupted, PredictError, EXIT_NO_GPU and EXIT_INTERRUPTED, for the project's CLI
  to report.

TensorFlow is imported only inside gpu_preflight.TfBoundary's methods, so every module imports without it; the
project's lock chooses TensorFlow (its cpu or gpu extra), and MLflow, which `tracking`, `registry`, `sweep` and
`batch_tracking` import. Never imports gpu_runner (the launch jobs' package), and gpu_runner never imports it: a CPU launch job
loads none of this.
"""
