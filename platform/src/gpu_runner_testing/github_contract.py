"""GitHub's REST description for the operations we use (github-openapi.json beside this module), as checks.

The file is extracted from GitHub's official OpenAPI description (npm `@octokit/openapi`, version recorded in
it) by `python -m gpu_runner_testing.extract_github_openapi`. The GitHub double runs every request and every response through
`Contract`, so the double cannot answer what GitHub would not, and the client cannot send what GitHub would
refuse, without a test failing.

The schemas are OpenAPI 3.0 (`nullable`, OpenAPI formats), which plain JSON Schema validators misread (they
ignore `nullable` and would accept nothing where GitHub sends null): hence openapi-schema-validator's
OAS30Validator, a JSON Schema validator that speaks that dialect.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema.exceptions import ValidationError, best_match
from openapi_schema_validator import OAS30Validator, oas30_format_checker

# Package data of the platform (the testing package ships it): the same file in a checkout and in a bake's venv.
CONTRACT_FILE = Path(__file__).resolve().with_name("github-openapi.json")

# Error statuses GitHub can answer on any endpoint although an operation's description does not list them:
# 403/429 for a primary or secondary rate limit and 404 for a private resource the credential cannot see
# (docs.github.com "Troubleshooting the REST API", read 2026-12-01), and GitHub's generic 400/401/422/5xx.
# Their body is the description's `basic-error`. Any other status an operation does not list (a 200 from a
# DELETE, a 201 from a dispatch, a redirect) is a violation.
GENERIC_ERROR_STATUSES = frozenset({400, 401, 403, 404, 422, 429, 500, 502, 503, 504})


class ContractViolation(AssertionError):
    """A request or response that GitHub's REST description does not allow."""


@dataclass(frozen=True)
class Operation:
    operation_id: str
    method: str
    path: str
    documentation_url: str
    parameters: tuple[dict[str, Any], ...]
    request_body: dict[str, Any] | None
    responses: dict[int, dict[str, Any] | None]
    pattern: re.Pattern[str]

    @classmethod
    def from_contract(cls, operation_id: str, data: dict[str, Any]) -> Operation:
        # "{owner}" -> one path segment; GitHub's templates have no other syntax.
        regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(data["path"]))
        return cls(
            operation_id=operation_id,
            method=data["method"],
            path=data["path"],
            documentation_url=data["documentation_url"],
            parameters=tuple(data["parameters"]),
            request_body=data["request_body"],
            responses={int(status): schema for status, schema in data["responses"].items()},
            pattern=re.compile(regex),
        )


class Contract:
    """The extracted operations, matched by method and path; every check returns a list of plain messages."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.source: dict[str, Any] = data["source"]
        self.basic_error: dict[str, Any] = data["basic_error"]
        self.operations = {
            op_id: Operation.from_contract(op_id, op) for op_id, op in data["operations"].items()
        }

    @classmethod
    def load(cls, path: Path = CONTRACT_FILE) -> Contract:
        return cls(json.loads(path.read_text()))

    def without(self, *operation_ids: str) -> Contract:
        """A copy that lacks some operations (to prove that a route outside the file is refused)."""
        data = {"source": self.source, "basic_error": self.basic_error, "operations": {}}
        contract = Contract(data)
        contract.operations = {k: v for k, v in self.operations.items() if k not in operation_ids}
        return contract

    def match(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        for op in self.operations.values():
            if op.method == method and (found := op.pattern.fullmatch(path)):
                return op, found.groupdict()
        return None

    # ------------------------------------------------------------------ requests
    def check_request(
        self, op: Operation, path_params: dict[str, str], query: dict[str, str], body: Any
    ) -> list[str]:
        """What in the request GitHub's description does not allow, as GitHub-style lines (empty = valid)."""
        errors: list[str] = []
        known = {p["name"] for p in op.parameters if p["in"] == "query"}
        for name in sorted(set(query) - known):
            errors.append(f"Unknown query parameter {name!r} for {op.operation_id}.")
        for param in op.parameters:
            where = {"path": path_params, "query": query}.get(param["in"])
            if where is None:
                continue  # headers/cookies: none of our operations has one
            if param["name"] not in where:
                if param["required"]:
                    errors.append(f'"{param["name"]}" wasn\'t supplied.')
                continue
            value = _from_text(where[param["name"]], param["schema"])
            errors += [
                f"Invalid {param['in']} parameter {param['name']}: {e}"
                for e in _errors(param["schema"], value)
            ]
        spec = op.request_body
        if spec is None:
            if body not in (None, {}):
                errors.append(f"{op.operation_id} takes no request body.")
        elif body is None:
            if spec["required"]:
                errors.append("Request body wasn't supplied.")
        elif spec["schema"] is not None:
            errors += _body_errors(spec["schema"], body)
        return errors

    # ------------------------------------------------------------------ responses
    def check_response(self, op: Operation | None, status: int, payload: Any) -> list[str]:
        """What in the response GitHub's description does not allow (empty = valid)."""
        if op is None:
            return (
                [] if status >= 400 else ["the double answered a route that is not in the description file"]
            )
        if status not in op.responses:
            if status in GENERIC_ERROR_STATUSES:
                return [f"{status} body: {e}" for e in _errors(self.basic_error, payload)]
            return [
                f"status {status} is not a documented answer of {op.operation_id} ({sorted(op.responses)})"
            ]
        schema = op.responses[status]
        if schema is None:
            return [] if payload in (None, b"", "") else [f"status {status} of {op.operation_id} has no body"]
        return [f"{status} body: {e}" for e in _errors(schema, payload)]


@cache
def default_contract() -> Contract:
    return Contract.load()


def _validator(schema: dict[str, Any]) -> OAS30Validator:
    return OAS30Validator(schema, format_checker=oas30_format_checker)


def _errors(schema: dict[str, Any], instance: Any) -> list[str]:
    return [_describe(e) for e in sorted(_validator(schema).iter_errors(instance), key=_where)]


def _where(error: ValidationError) -> list[str]:
    return list(map(str, error.absolute_path))


def _describe(error: ValidationError) -> str:
    """Where and why; for anyOf/oneOf, why the closest alternative failed (else the message only says none did)."""
    pointer = "/" + "/".join(_where(error)) if error.absolute_path else "(root)"
    if error.context:
        closest = best_match(error.context)
        if closest is not None:
            inner = "/" + "/".join(_where(closest)) if closest.absolute_path else "(root)"
            return (
                f"{pointer}: no alternative of {error.validator} matches; closest: {inner}: {closest.message}"
            )
    return f"{pointer}: {error.message}"


def _body_errors(schema: dict[str, Any], body: Any) -> list[str]:
    """GitHub's own wording for a body its schema refuses (seen in 422 answers: `"ref" wasn't supplied.`,
    stephencelis/ghi#371, 2018; `Invalid property /issue_id: "4158796803" is not of type integer.`,
    benkruger/flow#595, 2026-03)."""
    lines = []
    for error in sorted(_validator(schema).iter_errors(body), key=_where):
        pointer = "/" + "/".join(_where(error))
        if error.validator == "required":
            missing = re.match(r"'([^']+)'", error.message)
            lines.append(f'"{missing[1] if missing else error.message}" wasn\'t supplied.')
        elif error.validator == "type":
            lines.append(
                f"Invalid property {pointer}: {json.dumps(error.instance)} is not of type {error.validator_value}."
            )
        else:
            lines.append(f"Invalid property {pointer}: {_describe(error).partition(': ')[2]}.")
    return list(dict.fromkeys(lines))  # OAS30Validator reports a null twice (nullable and type)


def _from_text(text: str, schema: dict[str, Any]) -> Any:
    """A path or query value as the schema's type (left as text when it is not one: the check then says so)."""
    kind = schema.get("type")
    if kind == "integer" and re.fullmatch(r"-?\d+", text):
        return int(text)
    if kind == "boolean" and text in ("true", "false"):
        return text == "true"
    return text
