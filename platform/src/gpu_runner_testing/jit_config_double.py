"""The `encoded_jit_config` GitHub's generate-jitconfig endpoint answers, at its real size and shape.

Shape (where each piece comes from, read 2026-12-01):
- outer layer: base64 of a compact JSON object whose keys are the runner's file names `.runner`, `.credentials`
  and `.credentials_rsaparams`, each value the base64 of that file's content. actions/runner
  src/Runner.Listener/Runner.cs (`--jitconfig`: base64 -> Dictionary<string, string>, each value base64-decoded
  and written to the runner root under its key), HostContext.GetConfigFile (the three names).
- `.runner`: the RunnerSettings data contract (src/Runner.Common/ConfigurationStore.cs: AgentId, AgentName,
  PoolId, PoolName, ServerUrl, GitHubUrl, WorkFolder, UseV2Flow, ServerUrlV2; default values are not emitted).
  A real config printed by a GitHub engineer (actions/runner PR #1925, 2022-06-02) starts
  `{"AgentId":"3","AgentName":"189a…","PoolId":"1","PoolName":null,"ServerUrl":"…`: ids as strings, no spaces.
  UseV2Flow/ServerUrlV2 (the broker flow) are what GitHub added since; they are why the config outgrew 4 KB.
- `.credentials`: CredentialData {Scheme, Data} with Scheme "OAuth" and Data keys clientId, authorizationUrl,
  requireFipsCryptography (src/Runner.Listener/Configuration/ConfigurationManager.cs, OAuthCredential.cs).
- `.credentials_rsaparams`: RSAParametersSerializable (src/Runner.Listener/Configuration/IRSAKeyManager.cs):
  d, dp, dq, exponent, inverseQ, modulus, p, q; .NET's RSAParameters byte arrays, which Newtonsoft serialises as
  base64 of the big-endian bytes (modulus and d the key's length, the CRT values half of it). GitHub generates the
  key server-side and ships its private half in the config, so the key here is a real RSA-2048 key too.

Size: terraform-aws-github-runner PR #4613 (2025-06-16) found real configs "about 4000 bytes" just before a
GitHub change pushed them over the 4,096 of a Standard SSM parameter; `test_jit_config_double.py` pins the
length this module produces to that range.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import secrets
import string
import threading
import uuid
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

KEY_BITS = 2048
# Generating an RSA-2048 key costs ~0.15 s on the test machine and a test session issues dozens of configs, so
# configs take their keys from a small pool: the key proves size and shape, nothing depends on it being unique.
KEY_POOL_SIZE = 4
_ALPHANUMERIC = string.ascii_letters + string.digits


@functools.cache
def _key(slot: int) -> rsa.RSAPrivateKey:
    del slot  # one key per pool slot
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


_slots = itertools.cycle(range(KEY_POOL_SIZE))
_slots_lock = threading.Lock()


def _next_key() -> rsa.RSAPrivateKey:
    with _slots_lock:
        slot = next(_slots)
    return _key(slot)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _compact(document: Any) -> bytes:
    """JSON as the runner's serializer writes it: no spaces after separators."""
    return json.dumps(document, separators=(",", ":")).encode()


def rsa_parameters(key: rsa.RSAPrivateKey) -> dict[str, str]:
    """.NET RSAParameters of `key`, as RSAParametersSerializable writes them (fixed-length big-endian, base64)."""
    numbers = key.private_numbers()
    public = numbers.public_numbers
    size = (public.n.bit_length() + 7) // 8
    half = (size + 1) // 2

    def field(value: int, length: int) -> str:
        return _b64(value.to_bytes(length, "big"))

    return {
        "d": field(numbers.d, size),
        "dp": field(numbers.dmp1, half),
        "dq": field(numbers.dmq1, half),
        "exponent": _b64(public.e.to_bytes((public.e.bit_length() + 7) // 8, "big")),
        "inverseQ": field(numbers.iqmp, half),
        "modulus": field(public.n, size),
        "p": field(numbers.p, half),
        "q": field(numbers.q, half),
    }


def documents(
    *, runner_id: int, runner_name: str, repository: str, pool_id: int, work_folder: str
) -> dict[str, dict[str, Any]]:
    """The three runner files a JIT config carries, before encoding."""
    # The pipelines service host and its per-account path id; the id's length (50) is a guess, no public source
    # prints a whole ServerUrl. The other fields' lengths are fixed by their formats (GUIDs, base64 key parts).
    host = f"https://pipelinesghubeus{secrets.randbelow(30) + 1}.actions.githubusercontent.com"
    service = "".join(secrets.choice(_ALPHANUMERIC) for _ in range(50))
    return {
        ".runner": {
            "AgentId": str(runner_id),
            "AgentName": runner_name,
            "PoolId": str(pool_id),
            "PoolName": "Default",
            "ServerUrl": f"{host}/{service}/",
            "GitHubUrl": f"https://github.com/{repository}",
            "WorkFolder": work_folder,
            "UseV2Flow": True,
            "ServerUrlV2": "https://broker.actions.githubusercontent.com/",
        },
        ".credentials": {
            "Scheme": "OAuth",
            "Data": {
                "clientId": str(uuid.uuid4()),
                "authorizationUrl": f"{host}/{service}/_apis/oauth2/token/{uuid.uuid4()}",
                "requireFipsCryptography": "True",
            },
        },
        ".credentials_rsaparams": rsa_parameters(_next_key()),
    }


def encoded_jit_config(
    *, runner_id: int, runner_name: str, repository: str, pool_id: int = 1, work_folder: str = "_work"
) -> str:
    """The `encoded_jit_config` string of a generate-jitconfig answer."""
    files = documents(
        runner_id=runner_id,
        runner_name=runner_name,
        repository=repository,
        pool_id=pool_id,
        work_folder=work_folder,
    )
    return _b64(_compact({name: _b64(_compact(content)) for name, content in files.items()}))
