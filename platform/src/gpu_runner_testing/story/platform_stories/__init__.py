"""The platform's stories: what the GPU lifecycle must survive and refuse, told through a project's own train.yml
under act (the fault scenarios, the runner hijack, the environment dump, another run's stop, a branch name that is
a shell injection, the team MLflow server, the cost report). They hold no project's choice, so they ship with the
platform and run in each project's `make e2e` against its workflows (`--pyargs gpu_runner_testing.story.
platform_stories`), and in the template repository's CI against a default bake: written and kept once."""
