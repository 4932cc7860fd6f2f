"""The JIT config's SSM parameter: a tier that holds GitHub's real config, and nothing weaker than before."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from gpu_runner.core import naming
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import LaunchBlockedError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import lifecycle, ssm
from gpu_runner.setup import TEMPLATE as STACK_TEMPLATE
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import GitHubDouble
from gpu_runner_testing.live_instances import live

NAME = "/gpu-runner/demo/777-1/jitconfig"
INSTANCE_ARN = f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0"
TAGS = {
    "gpu-runner:managed-by": "gpu-runner",
    "gpu-runner:run-id": "777",
    "gpu-runner:instance-arn": INSTANCE_ARN,
}
KEY = "alias/gpu-runner/demo/jit-config"


@pytest.fixture
def jit(github: GitHubRunners) -> str:
    """A config as GitHub issues it (the double's, real size and shape)."""
    return github.create_jit_config("gpu-runner-777-1", ["gpu-runner-777-1"]).encoded_jit_config


def test_a_real_jit_config_does_not_fit_the_standard_tier(aws: Aws, faults: AwsFaults, jit: str) -> None:
    """The call as it was before the fix (no Tier: Standard) is refused by AWS before any instance starts."""
    assert len(jit) > ssm.STANDARD_TIER_MAX_BYTES
    client = aws.client("ssm", REGION)
    with pytest.raises(ClientError) as refused:
        client.put_parameter(Name=NAME, Value=jit, Type="SecureString", Overwrite=False)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "maximum parameter value of 4096 characters" in refused.value.response["Error"]["Message"]


def test_put_jit_config_stores_it_in_the_advanced_tier_unweakened(
    aws: Aws, faults: AwsFaults, jit: str
) -> None:
    client = aws.client("ssm", REGION)
    ssm.put_jit_config(client, NAME, jit, TAGS, key_id=KEY)

    assert faults.refused == []
    stored = client.get_parameter(Name=NAME, WithDecryption=True)["Parameter"]
    assert stored["Value"] == jit and stored["Type"] == "SecureString"
    (meta,) = client.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [NAME]}])["Parameters"]
    assert meta["Tier"] == "Advanced"
    assert not meta.get("Policies")  # no parameter policy came with the tier
    # The stack's customer-managed key: with the AWS-managed aws/ssm key, any principal of the account allowed
    # ssm:GetParameter there could decrypt it.
    assert meta["KeyId"] == KEY
    listed = client.list_tags_for_resource(ResourceType="Parameter", ResourceId=NAME)["TagList"]
    assert {t["Key"]: t["Value"] for t in listed} == TAGS
    # Never overwritten: a second launch for the same attempt must not replace a live config.
    with pytest.raises(ClientError) as again:
        ssm.put_jit_config(client, NAME, jit, TAGS, key_id=KEY)
    assert again.value.response["Error"]["Code"] == "ParameterAlreadyExists"


def test_a_config_without_its_instance_arn_is_never_written(aws: Aws, faults: AwsFaults) -> None:
    """Without the tag the runner policy's condition names, no instance could read it; with a wrong one, another
    instance could: refused before any call."""
    untagged = {k: v for k, v in TAGS.items() if k != "gpu-runner:instance-arn"}
    with pytest.raises(LaunchBlockedError, match="gpu-runner:instance-arn"):
        ssm.put_jit_config(aws.client("ssm", REGION), NAME, "j", untagged, key_id=KEY)
    assert not aws.client("ssm", REGION).describe_parameters(
        ParameterFilters=[{"Key": "Name", "Values": [NAME]}]
    )["Parameters"]


@pytest.mark.parametrize(
    ("size", "tier"),
    [(1, "Standard"), (4096, "Standard"), (4097, "Advanced"), (8192, "Advanced")],
)
def test_the_cheapest_tier_that_holds_the_value(aws: Aws, faults: AwsFaults, size: int, tier: str) -> None:
    client = aws.client("ssm", REGION)
    ssm.put_jit_config(client, NAME, "j" * size, TAGS, key_id=KEY)
    (meta,) = client.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [NAME]}])["Parameters"]
    assert meta["Tier"] == tier
    assert faults.refused == []


def test_multibyte_values_are_sized_in_bytes() -> None:
    assert ssm.tier_for("é" * 2048) == "Standard"  # 4,096 bytes
    assert ssm.tier_for("é" * 2048 + "j") == "Advanced"


def test_a_config_no_tier_holds_fails_before_any_aws_call(aws: Aws, faults: AwsFaults) -> None:
    with pytest.raises(LaunchBlockedError, match="8193 bytes, more than the 8192"):
        ssm.put_jit_config(aws.client("ssm", REGION), NAME, "j" * 8193, TAGS, key_id=KEY)
    assert not aws.client("ssm", REGION).describe_parameters(
        ParameterFilters=[{"Key": "Name", "Values": [NAME]}]
    )["Parameters"]


@pytest.mark.slow  # starts the aws CLI (a fresh interpreter)
def test_the_boot_script_reads_a_real_size_config_back_whole(aws: Aws, faults: AwsFaults, jit: str) -> None:
    """user_data.sh's own read (the aws CLI, `--query Parameter.Value --output text`) returns the whole config,
    which it then hands to run.sh in ACTIONS_RUNNER_INPUT_JITCONFIG (never in argv)."""
    ssm.put_jit_config(aws.client("ssm", REGION), NAME, jit, TAGS, key_id=KEY)
    script = (Path(lifecycle.__file__).parent / "user_data.sh").read_text()
    read = re.search(r'aws (ssm get-parameter --with-decryption --region "\$REGION" --name "\$PARAMETER_NAME" \\\n'
                     r"\s+--query Parameter\.Value --output text)", script)  # fmt: skip
    assert read, "user_data.sh no longer reads the parameter this way: update this test with it"
    argv = read.group(1).replace('"$REGION"', REGION).replace('"$PARAMETER_NAME"', NAME).replace("\\\n", " ")
    aws_cli = Path(sys.executable).parent / "aws"
    result = subprocess.run(
        [str(aws_cli), *argv.split()], capture_output=True, text=True, env=os.environ, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n") == jit
    assert 'ACTIONS_RUNNER_INPUT_JITCONFIG=$jit runuser -u "$RUNNER_USER" -- ./run.sh >' in script
    assert "--jitconfig" not in script


def test_a_tag_over_the_limit_set_through_the_real_launch_fails_the_launch(
    settings: Settings,
    ctx: RunContext,
    aws: Aws,
    faults: AwsFaults,
    github: GitHubRunners,
    github_double: GitHubDouble,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: tag values no longer cut to 256 characters. The limit double refuses it as AWS would, and the
    launch cleans up what it created. The instance is launched before its parameter is written (issue 13 item 4:
    the parameter carries the instance's ARN), so EC2 is the first to refuse the same tags."""
    monkeypatch.setattr(naming, "tag_value", lambda value: value)
    long_branch = "train/" + "b" * 251  # 257 characters
    with pytest.raises(LaunchBlockedError, match="Tag value exceeds the maximum length of 256"):
        lifecycle.launch(settings, dataclasses.replace(ctx, branch=long_branch), aws, github)
    assert [operation for operation, _ in faults.refused] == ["RunInstances"]
    assert not aws.client("ssm", REGION).describe_parameters(
        ParameterFilters=[{"Key": "Name", "Values": [NAME]}]
    )["Parameters"]
    assert github_double.runners == {}  # the registration was removed again
    assert live(aws.client("ec2", REGION), managed_only=True) == []


def test_no_role_may_share_the_advanced_parameter_with_another_account() -> None:
    """What the Advanced tier adds for an attacker: an Advanced parameter can be shared with other accounts through
    a resource policy (botocore ssm model, PutResourcePolicy: "To share a parameter, it must be in the advanced
    parameter tier"). No role of the stack may call it, and no SSM action is granted by wildcard."""
    template = STACK_TEMPLATE.read_text()
    actions = set(re.findall(r"\bssm:[A-Za-z*]+", template))
    assert actions, "no SSM action found: the template moved, update this test"
    assert "ssm:PutResourcePolicy" not in actions
    assert not [action for action in actions if "*" in action], actions
    assert not re.search(r"Action:\s*['\"]?\*", template)
