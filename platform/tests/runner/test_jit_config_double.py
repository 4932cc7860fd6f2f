"""The GitHub double's encoded_jit_config has the real shape and size (sources in jit_config_double.py)."""

from __future__ import annotations

import base64
import json

from cryptography.hazmat.primitives.asymmetric import rsa

from gpu_runner.core.github import GitHubRunners
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, decode_jit_config
from gpu_runner_testing.jit_config_double import encoded_jit_config

NAME = "gpu-runner-777-1"
# Measured (2026-12-01) with the default test repository and this runner name: 4,140-4,144 characters (the
# ServerUrl's random host number has one or two digits). terraform-aws-github-runner PR #4613 (2025-06-16): real
# configs were "about 4000 bytes" until a GitHub change pushed them past the 4,096 of a Standard SSM parameter.
# Longer repository and runner names add about 1.8 characters per character (two base64 layers).
MEASURED_RANGE = range(4_097, 4_400)


def _int(field: str) -> int:
    return int.from_bytes(base64.b64decode(field), "big")


def test_the_config_is_the_runners_three_files_in_two_base64_layers(github: GitHubRunners) -> None:
    jit = github.create_jit_config(NAME, [NAME])
    outer = json.loads(base64.b64decode(jit.encoded_jit_config, validate=True))
    assert list(outer) == [".runner", ".credentials", ".credentials_rsaparams"]
    # actions/runner PR #1925's printed config: compact JSON, no spaces, in both layers.
    assert base64.b64decode(jit.encoded_jit_config).startswith(b'{".runner":"eyJBZ2VudElkIjoi')
    files = decode_jit_config(jit.encoded_jit_config)

    runner = files[".runner"]
    assert runner == {
        "AgentId": str(jit.runner.id),
        "AgentName": NAME,
        "PoolId": "1",
        "PoolName": "Default",
        "ServerUrl": runner["ServerUrl"],
        "GitHubUrl": f"https://github.com/{DEFAULT_REPOSITORY}",
        "WorkFolder": "_work",
        "UseV2Flow": True,
        "ServerUrlV2": "https://broker.actions.githubusercontent.com/",
    }
    # RunnerSettings.IsHostedServer: github.com's pipelines host ends in .actions.githubusercontent.com
    assert runner["ServerUrl"].split("/")[2].endswith(".actions.githubusercontent.com")

    credentials = files[".credentials"]
    assert credentials["Scheme"] == "OAuth"
    assert set(credentials["Data"]) == {"clientId", "authorizationUrl", "requireFipsCryptography"}


def test_the_rsa_parameters_are_a_real_rsa_2048_private_key(github: GitHubRunners) -> None:
    params = decode_jit_config(github.create_jit_config(NAME, [NAME]).encoded_jit_config)[
        ".credentials_rsaparams"
    ]
    assert list(params) == ["d", "dp", "dq", "exponent", "inverseQ", "modulus", "p", "q"]
    # .NET RSAParameters lengths: modulus and d the key size, the CRT values half of it.
    sizes = {name: len(base64.b64decode(value)) for name, value in params.items()}
    assert sizes == {
        "d": 256,
        "dp": 128,
        "dq": 128,
        "exponent": 3,
        "inverseQ": 128,
        "modulus": 256,
        "p": 128,
        "q": 128,
    }
    # The numbers rebuild a valid key (cryptography checks p*q == n, d, the CRT values and e).
    public = rsa.RSAPublicNumbers(_int(params["exponent"]), _int(params["modulus"]))
    key = rsa.RSAPrivateNumbers(
        p=_int(params["p"]),
        q=_int(params["q"]),
        d=_int(params["d"]),
        dmp1=_int(params["dp"]),
        dmq1=_int(params["dq"]),
        iqmp=_int(params["inverseQ"]),
        public_numbers=public,
    ).private_key()
    assert key.key_size == 2048


def test_the_encoded_length_is_over_4096_as_githubs_is(github: GitHubRunners) -> None:
    lengths = {
        len(github.create_jit_config(f"gpu-runner-777-{attempt}", ["x"]).encoded_jit_config)
        for attempt in range(1, 9)
    }
    assert all(length in MEASURED_RANGE for length in lengths), lengths
    # A long repository name and run id: still far below the 8,192 an Advanced parameter holds.
    longest = encoded_jit_config(
        runner_id=2**53, runner_name="gpu-runner-99999999999-99", repository="o" * 39 + "/" + "r" * 100
    )
    assert 4_096 < len(longest) < 5_000
