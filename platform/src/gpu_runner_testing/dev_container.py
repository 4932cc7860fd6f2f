"""The Dev Container specification's base schema, which a project's tests validate its .devcontainer/devcontainer.json
against (no team edits a specification, so it ships here rather than in every project).

devcontainers/spec, schemas/devContainer.base.schema.json at commit c95ffeed1d059abfe9ffbe79762dc2fa4e7c2421
(2026-03-20; MIT, the repository's LICENSE-CODE), copied unchanged beside this module. The published
devContainer.schema.json is this base plus VS Code's and Codespaces' `customizations` by remote $ref; the base
schema holds `customizations` as an open object. Its draft is 2019-09 (its `$schema`)."""

from pathlib import Path

SCHEMA = Path(__file__).with_name("devContainer.base.schema.json")
