"""A project's hyperparameter sweep (configs/sweep.yaml), written once: Optuna's study in S3 or a local folder,
waves of trials planned, trained as child runs of one MLflow parent run, collected, and the best trial compared
with the champion when the sweep ends.

The project hands its training config, the rules of what may be searched and its training function
(`project.SweepProject`); the commands (`commands.plan`, `trial`, `collect`, `local`) are what sweep.yml's jobs
and `make sweep` run through the project's CLI:

- `space`: the sweep file's schema, each range checked against the project's training config;
- `study`: the Optuna study (sampler, pruner, the space check, trials left running);
- `runs`: the parent and child runs and the roll-up of the children's billed cost;
- `plan`: one wave (budget, wave claim, resumed and new trials: the workflow's matrix);
- `trial`: one trial trained through the project's function, reported to the pruner, told to the study;
- `collect`: a wave's end on the parent run, and whether another wave starts.

TensorFlow-free: only the project's training function trains.
"""
