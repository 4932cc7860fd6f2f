"""The runner tests' fixtures: the platform's (gpu_runner_testing.runner_fixtures), imported by name so that they
apply to this folder only (pytest takes a plugin only from the root conftest.py, for every test)."""

from gpu_runner_testing.runner_fixtures import (  # noqa: F401 (fixtures: pytest finds them by name)
    ami,
    ami_for_infra,
    aws,
    cli_env,
    ctx,
    faults,
    github,
    github_double,
    logged,
    oidc_provider,
    recorded,
    security_group,
    session,
    settings,
    settings_file,
    stack,
    workflow_env,
)
