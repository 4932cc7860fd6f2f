"""Who may read the team MLflow server's passwords, and the passwords themselves.

The three passwords (admin, ci, promote) are SSM SecureStrings under the stack's own KMS key (gpu_runner/mlflow_server/mlflow-server.yaml
PasswordKey), not under aws/ssm, which every principal of the account may use through SSM. Its key policy lets the
server role decrypt them, the Batch execution role the ci one, and the people named here (who ran `up`, and any
--password-reader) read and write them: they pipe ci's and promote's into GitHub and log in as admin."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

from gpu_runner.mlflow_server.mlflow_wake import MlflowServerError

log = logging.getLogger(__name__)

USERS = ("admin", "ci", "promote")
DESCRIPTIONS = {
    "admin": "MLflow admin password (team server)",
    "ci": "MLflow password of the train, sweep and Batch jobs' ci user (team server)",
    "promote": "MLflow password of promote.yml's promote user (team server)",
}
# IAM ARNs a key policy may name (IAM User Guide, "IAM identifiers": arn:aws:iam::<account>:role/<path><name>,
# user likewise); a key policy principal is a role or user, never the account root, which would hand the key to
# every IAM policy of the account.
IAM_PRINCIPAL = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+")
# GetCallerIdentity of a role session: arn:aws:sts::<account>:assumed-role/<role name>/<session> (IAM User Guide,
# "IAM identifiers", "Role session principals"): the role's own ARN (its path included) comes from iam:GetRole.
ASSUMED_ROLE = re.compile(r"arn:aws[a-z-]*:sts::\d{12}:assumed-role/(?P<role>[A-Za-z0-9+=,.@_-]+)/.+")


def parameter_names(ssm_prefix: str) -> dict[str, str]:
    return {user: f"{ssm_prefix}-mlflow-{user}-password" for user in USERS}


def password_readers(sts: Any, iam: Any, extra: Iterable[str] = ()) -> list[str]:
    """The caller's own role or user, then every --password-reader: the principals the key lets read the
    passwords (the key policy replaces them on every `up`: pass everyone who needs them). A caller that is no
    role or user (the root user, a federated user) is left out, with a word, when others are named."""
    wrong = [arn for arn in extra if not IAM_PRINCIPAL.fullmatch(arn)]
    if wrong:
        raise MlflowServerError(
            f"--password-reader: {', '.join(wrong)} is not an IAM role or user ARN "
            "(arn:aws:iam::<account>:role/<name> or :user/<name>)"
        )
    caller = sts.get_caller_identity()["Arn"]
    if assumed := ASSUMED_ROLE.fullmatch(caller):
        caller = iam.get_role(RoleName=assumed["role"])["Role"]["Arn"]
    readers = [caller] if IAM_PRINCIPAL.fullmatch(caller) else []
    if not readers:
        if not extra:
            raise MlflowServerError(
                f"you run as {caller}, which a key policy cannot name alone (the root user would let every IAM "
                "policy of the account decrypt the passwords): run `up` as an IAM role or user, or name who may "
                "read them with --password-reader <role or user ARN>"
            )
        log.info(f"{caller} is no IAM role or user: only the --password-reader principals read the passwords")
    return list(dict.fromkeys([*readers, *extra]))


def batch_execution_role(cfn: Any, iam: Any, batch_stack: str) -> str:
    """The batch stack's ExecutionRole ARN (it resolves the ci password for the jobs), or "" without one: the
    stack is absent, or was deployed without the MLflow password (its ExecutionRole is conditional)."""
    try:
        resources = cfn.describe_stack_resources(StackName=batch_stack)["StackResources"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ValidationError":  # no such stack
            return ""
        raise
    roles = [r.get("PhysicalResourceId") for r in resources if r.get("LogicalResourceId") == "ExecutionRole"]
    return str(iam.get_role(RoleName=roles[0])["Role"]["Arn"]) if roles else ""


def store_passwords(ssm: Any, ssm_prefix: str, key_arn: str) -> None:
    """Each password under the stack's key: a new random one where none exists, and one still under another key
    (aws/ssm, before the stack had its own) written again under this one, same value. Never printed."""
    for user, name in parameter_names(ssm_prefix).items():
        try:
            meta = ssm.get_parameter(Name=name)["Parameter"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ParameterNotFound":
                raise
            # 32 bytes, URL-safe: no character the env file, the ini file or basic auth would need to quote.
            _put(ssm, name, user, secrets.token_urlsafe(32), key_arn, overwrite=False)
            log.info(f"stored a new {DESCRIPTIONS[user]} in {name}")
            continue
        if _key_of(ssm, name) != key_arn:
            value = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
            _put(ssm, name, user, value, key_arn, overwrite=True)
            log.info(f"{name}: now under the stack's own key (was {meta.get('Type')} under another key)")


def _key_of(ssm: Any, name: str) -> str:
    found = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}])["Parameters"]
    return str(found[0].get("KeyId", "")) if found else ""


def _put(ssm: Any, name: str, user: str, value: str, key_arn: str, *, overwrite: bool) -> None:
    ssm.put_parameter(
        Name=name,
        Description=DESCRIPTIONS[user],
        Type="SecureString",
        KeyId=key_arn,
        Value=value,
        Overwrite=overwrite,
    )
