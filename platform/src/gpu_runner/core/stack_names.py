"""The names of a repository's stacks (gpu-runner, mlflow-server, batch): one place, because each family finds the
others' stacks by name (batch and the MLflow server read the gpu-runner stack's outputs, the MLflow server gives
the Batch stack's execution role its password, the cost report prices the server)."""

from __future__ import annotations

import hashlib
import re

# owner/name as bootstrap, batch up and mlflow-server up take it (--repository), which the names derive from.
REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+")
# "A stack name can contain only alphanumeric characters (case sensitive) and hyphens. It must start with an
# alphabetical character and can't be longer than 128 characters" (botocore 1.44.8's CloudFormation model,
# CreateStack StackName). The roles, policies and profile get names CloudFormation generates from it and fits to
# IAM's limits (role names 64 characters: botocore's IAM model, roleNameType max 64), so none is named here.
STACK_NAME_MAX = 128
# GitHub owner and repository names are case-insensitive: one repository, one key, however it is spelled.
REPOSITORY_KEY_HEX = 8
# The Batch template names queues <stack>-gpu / <stack>-multinode and job definitions <stack>-train /
# <stack>-train-multinode. Job queue and job definition names: up to 128 letters, numbers, hyphens and underscores
# (botocore 1.44.8's batch model, CreateJobQueue jobQueueName, RegisterJobDefinition jobDefinitionName), so the
# stack name keeps 16 characters for the longest suffix. CloudFormation's own limit (128) is looser.
BATCH_LONGEST_SUFFIX = "-train-multinode"
BATCH_STACK_NAME_MAX = STACK_NAME_MAX - len(BATCH_LONGEST_SUFFIX)


def repository_key(repository: str) -> str:
    """A short stable hash of owner/name: two repositories baked with the same project slug get different names."""
    return hashlib.sha256(repository.lower().encode("utf-8")).hexdigest()[:REPOSITORY_KEY_HEX]


def named_stack(kind: str, project: str, repository: str, max_length: int = STACK_NAME_MAX) -> str:
    """`<kind>-<project>-<repository key>` within CloudFormation's name rules, cut to `max_length`: the name of
    each of a repository's stacks (gpu-runner, mlflow-server, batch)."""
    suffix = f"-{repository_key(repository)}"
    base = f"{kind}-" + re.sub(r"[^A-Za-z0-9-]", "-", project)
    return base[: max_length - len(suffix)] + suffix


def stack_name(project: str, repository: str) -> str:
    """`gpu-runner-<project>-<repository key>`: the bootstrap stack."""
    return named_stack("gpu-runner", project, repository)


def server_stack_name(project: str, repository: str) -> str:
    """`mlflow-server-<project>-<repository key>`, beside the gpu-runner stack of the same repository."""
    return named_stack("mlflow-server", project, repository)


def batch_stack_name(project: str, repository: str) -> str:
    """`batch-<project>-<repository key>`, beside the gpu-runner stack of the same repository."""
    return named_stack("batch", project, repository, BATCH_STACK_NAME_MAX)
