"""Extract the GitHub REST operations this project uses from GitHub's official OpenAPI description.

The description is GitHub's own (github/rest-api-description), published on the npm registry as
`@octokit/openapi`; this reads its dereferenced api.github.com variant, keeps only OPERATIONS, drops the prose
(descriptions, examples) and writes github-openapi.json beside this module, which the GitHub double validates every
request and response against. The committed file is what the tests use (offline); rerun this after changing
OPERATIONS or the pinned package version:

    npm install --prefix /tmp/octokit @octokit/openapi@<version>
    python -m gpu_runner_testing.extract_github_openapi --package /tmp/octokit/node_modules/@octokit/openapi
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

PACKAGE = "@octokit/openapi"
DESCRIPTION = "generated/api.github.com.deref.json"
ENV_PACKAGE_DIR = "OCTOKIT_OPENAPI_DIR"
OUTPUT = Path(__file__).resolve().with_name("github-openapi.json")

# Every GitHub REST operation the runner client sends or the test double serves, by operationId. Add one here
# (then rerun this script) before the client uses it or the double serves it: the double refuses a route that
# is not in the extracted file.
OPERATIONS = (
    # Runner lifecycle (gpu_runner.core.github.GitHubRunners)
    "actions/generate-runner-jitconfig-for-repo",
    "actions/list-self-hosted-runners-for-repo",
    "actions/get-self-hosted-runner-for-repo",
    "actions/delete-self-hosted-runner-from-repo",
    # Resume after a spot interruption (gpu_runner.core.github.dispatch_workflow)
    "actions/create-workflow-dispatch",
    # GitHub App authentication (PyGithub's GithubIntegration / AppInstallationAuth)
    "apps/get-repo-installation",
    "apps/create-installation-access-token",
    # Bootstrap (gpu_runner.setup.oidc_subject): the OIDC `sub` template that names the reusable workflow
    "actions/get-custom-oidc-sub-claim-for-repo",
    "actions/set-custom-oidc-sub-claim-for-repo",
    # Preflight (gpu_runner.doctor.doctor_github): the token's role on the repository, the settings' names
    "repos/get",
    "actions/list-repo-variables",
    "actions/list-repo-secrets",
    # Launch: the dispatch input `commit` must be in the history of the dispatched branch (gpu_runner.core.github.
    # check_commit_on_branch)
    "repos/compare-commits-with-basehead",
    # The pull-request comment of train.yml / sweep.yml (gpu_runner.pr_comment.pr_comment): the branch's open pull
    # requests, their comments, and the one comment it creates once and then edits
    "pulls/list",
    "issues/list-comments",
    "issues/create-comment",
    "issues/update-comment",
    # Preflight (gpu_runner.doctor.doctor_branch): what guards the default branch the roles trust. The rules active
    # rulesets apply to it, each contributing ruleset's bypass list, classic branch protection, and whether
    # GitHub Actions may approve pull requests (an approval that counts as a review)
    "repos/get-branch-rules",
    "repos/get-repo-ruleset",
    "repos/get-branch-protection",
    "actions/get-github-actions-default-workflow-permissions-repository",
    # Preflight (gpu_runner.doctor.doctor_repository): promote.yml's `production` environment (its reviewers and
    # deployment branches) and who may run a fork's pull request workflows
    "repos/get-environment",
    "repos/list-deployment-branch-policies",
    "actions/get-fork-pr-contributor-approval-permissions-repository",
    "actions/get-private-repo-fork-pr-workflows-settings-repository",
)
# Prose and samples: they do not constrain a request or a response, and they are most of the file's size.
_PROSE = frozenset({"description", "summary", "example", "examples", "title", "externalDocs"})
# Keywords whose value maps names to schemas: a property called "description" is data, not prose.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties"})


def package_dir(explicit: str | None = None) -> Path | None:
    """The installed package: --package, $OCTOKIT_OPENAPI_DIR, or node_modules in the current directory; None if absent."""
    candidates = [explicit, os.environ.get(ENV_PACKAGE_DIR), Path.cwd() / "node_modules" / PACKAGE]
    for candidate in candidates:
        if candidate and (Path(candidate) / DESCRIPTION).is_file():
            return Path(candidate)
    return None


def slim(schema: Any) -> Any:
    """The schema without prose keywords (validation keywords, defaults and enums are kept as they are)."""
    if isinstance(schema, list):
        return [slim(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _PROSE or key.startswith("x-"):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: slim(sub) for name, sub in value.items()}
        else:
            out[key] = slim(value)
    return out


def _json_schema(content: dict[str, Any] | None) -> dict[str, Any] | None:
    media = (content or {}).get("application/json")
    return slim(media["schema"]) if media and "schema" in media else None


def _operation(path: str, method: str, item: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    parameters = [*item.get("parameters", []), *op.get("parameters", [])]
    body = op.get("requestBody")
    return {
        "method": method.upper(),
        "path": path,
        "documentation_url": op.get("externalDocs", {}).get("url", ""),
        "parameters": [
            {
                "name": p["name"],
                "in": p["in"],
                "required": bool(p.get("required")),
                "schema": slim(p["schema"]),
            }
            for p in parameters
        ],
        "request_body": None
        if body is None
        else {"required": bool(body.get("required")), "schema": _json_schema(body.get("content"))},
        "responses": {
            status: _json_schema(r.get("content")) for status, r in sorted(op["responses"].items())
        },
        # Changes GitHub has announced for a later API version (the client sends none, so 2022-11-28 applies).
        "breaking_changes": [
            {"version": c["version"], "patch": c["patch"]} for c in op.get("x-github-breaking-changes", [])
        ],
    }


def extract(package: Path) -> dict[str, Any]:
    version = json.loads((package / "package.json").read_text())["version"]
    description = json.loads((package / DESCRIPTION).read_text())
    found: dict[str, dict[str, Any]] = {}
    for path, item in description["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and op.get("operationId") in OPERATIONS:
                found[op["operationId"]] = _operation(path, method, item, op)
    missing = sorted(set(OPERATIONS) - set(found))
    if missing:
        raise SystemExit(f"{PACKAGE}@{version} has no operation {', '.join(missing)}: check the operationId")
    return {
        "source": {
            "package": PACKAGE,
            "version": version,
            "file": DESCRIPTION,
            "openapi": description["openapi"],
            "api_version": description["info"]["version"],
            "extracted_by": "python -m gpu_runner_testing.extract_github_openapi",
        },
        # For an error status an operation does not list (GitHub's generic 401/403/404/5xx answers): the
        # description's `basic-error` schema, read where the dereferenced file inlines it (a documented 404).
        "basic_error": found["apps/get-repo-installation"]["responses"]["404"],
        "operations": {op_id: found[op_id] for op_id in OPERATIONS},
    }


def render(contract: dict[str, Any]) -> str:
    return json.dumps(contract, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--package", help=f"the installed {PACKAGE} directory (node_modules/{PACKAGE})")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    package = package_dir(args.package)
    if package is None:
        print(
            f"{PACKAGE} is not installed: npm install {PACKAGE}@<version>, then pass --package",
            file=sys.stderr,
        )
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    contract = extract(package)
    args.output.write_text(render(contract))
    print(f"wrote {args.output} from {PACKAGE}@{contract['source']['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
