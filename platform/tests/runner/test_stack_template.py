"""gpu_runner/setup/gpu-runner.yaml as written: linted (cfn-lint, parliament) and, for what moto does not deploy, read.

moto's CloudFormation creates the roles, policies, instance profile, security group and the bucket with its
encryption; it skips the OIDC provider resource and the bucket's versioning, public access block, lifecycle
rules and TLS-only policy. Those are asserted on the template instead (and cfn-lint checks their schema)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from parliament import analyze_policy_string

from gpu_runner.batch import TEMPLATE as BATCH_TEMPLATE
from gpu_runner.mlflow_server import TEMPLATE as SERVER_TEMPLATE
from gpu_runner_testing.gpu_runner_stack import (
    managed_policies,
    role_policies,
    runner_role_name,
    template,
)
from gpu_runner_testing.stack_deploy import OIDC_URL, TEMPLATE


@pytest.mark.slow  # cfn-lint loads its whole spec; `make lint` runs it too
@pytest.mark.parametrize(
    "template_path",
    [TEMPLATE, SERVER_TEMPLATE, BATCH_TEMPLATE],
    ids=lambda p: p.name,
)
def test_template_is_cfn_lint_clean(template_path: Path) -> None:
    result = cfn_lint(template_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # cfn-lint loads its whole spec
def test_cfn_lint_catches_a_broken_template(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        TEMPLATE.read_text().replace(
            "Status: Enabled\n      PublicAccessBlock", "Status: Enable\n      PublicAccessBlock"
        )
    )
    assert broken.read_text() != TEMPLATE.read_text()
    result = cfn_lint(broken)
    assert result.returncode != 0 and "E3030" in result.stdout, result.stdout


def test_parliament_catches_a_bad_policy() -> None:
    bad = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "ec2:RunInstance", "Resource": "*"},
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket"},
        ],
    }
    issues = " ".join(parliament_findings(bad))
    assert "UNKNOWN_ACTION" in issues and "RESOURCE_MISMATCH" in issues, issues
    # The accepted RunInstances finding stays narrow: any other action's mismatch is still reported.
    bad["Statement"][1] = {
        "Effect": "Allow",
        "Action": "ec2:TerminateInstances",
        "Resource": "arn:aws:s3:::b",
    }
    assert "RESOURCE_MISMATCH" in " ".join(parliament_findings(bad))


def test_every_policy_passes_parliament(stack: dict[str, Any]) -> None:
    documents = {
        "train": role_policies(stack, "TrainRoleArn"),
        "reaper": role_policies(stack, "ReaperRoleArn"),
        "sweep": role_policies(stack, "SweepRoleArn"),
        "predict": role_policies(stack, "PredictRoleArn"),
        "predict launch": role_policies(stack, "PredictLaunchRoleArn"),
        "runner": managed_policies(stack["session"], runner_role_name(stack)),
    }
    assert all(len(docs) == 1 for docs in documents.values()), documents
    for name, (document,) in documents.items():
        assert parliament_findings(document) == [], name


def test_bucket_settings_in_the_template() -> None:
    """What moto's CloudFormation does not apply to the bucket, asserted on the template itself."""
    resources = template()["Resources"]
    bucket = resources["Bucket"]
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(props["PublicAccessBlockConfiguration"]) == 4
    rules = {rule["Id"]: rule for rule in props["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-old-checkpoints"]["Prefix"] == "checkpoints/"
    assert rules["expire-old-checkpoints"]["ExpirationInDays"] == {"Ref": "CheckpointRetentionDays"}
    statements = {
        s["Sid"]: s for s in resources["BucketTlsOnlyPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    }
    tls = statements["DenyInsecureTransport"]
    assert (tls["Effect"], tls["Principal"], tls["Action"]) == ("Deny", "*", "s3:*")
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    # Who may use the objects: test_bucket_policy.py, with the document as deployed.
    assert set(statements) == {"DenyInsecureTransport", "OnlyTheStacksRolesAndAdministratorsReadListOrWrite"}
    provider = resources["GitHubOidcProvider"]
    assert provider["Condition"] == "CreateOidcProvider"
    assert provider["Properties"]["Url"] == f"https://{OIDC_URL}"
    assert provider["Properties"]["ClientIdList"] == ["sts.amazonaws.com"]
    assert "SecurityGroupIngress" not in resources["RunnerSecurityGroup"]["Properties"]
    assert not [r for r in resources.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]


def cfn_lint(path: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or "cfn-lint"
    return subprocess.run([tool, str(path)], capture_output=True, text=True, check=False)


def parliament_findings(document: dict[str, Any]) -> list[str]:
    return [
        f"{f.issue}: {f.detail}"
        for f in analyze_policy_string(json.dumps(document)).findings
        if not _split_run_instances(f.issue, f.detail) and not _via_aws_service(f.issue, f.detail)
    ]


def _via_aws_service(issue: str, detail: Any) -> bool:
    """parliament 1.6.4's table of global condition keys (parliament/statement.py) lacks aws:ViaAWSService, which
    the IAM User Guide documents as a global key ("AWS global condition context keys", aws:ViaAWSService) and
    RunnerPolicy's S3OnlyFromTheStackVpc uses as AWS's own example does. Only that key's finding is accepted."""
    return issue == "UNKNOWN_CONDITION_FOR_ACTION" and str(detail).startswith(
        "Unknown condition aws:ViaAWSService "
    )


def _split_run_instances(issue: str, detail: Any) -> bool:
    """parliament's one false positive here: it wants each RunInstances statement to name every resource type
    the action touches, but conditions differ per type (tags on instance and volume, none on image or subnet),
    so the policy splits them, as AWS's own RunInstances examples do. Only that exact finding is accepted."""
    return (
        issue == "RESOURCE_MISMATCH"
        and isinstance(detail, list)
        and bool(detail)
        and all(d.get("action") == "ec2:RunInstances" for d in detail)
    )
