"""Which generated project a story runs: the one whose tests are running."""

from __future__ import annotations

from pathlib import Path


def project_root(start: Path | None = None) -> Path:
    """The nearest directory from `start` (the working directory) up that holds the project's pyproject.toml and
    its .github/workflows/: `make e2e`, `make story` and `make test` run pytest at the project's root, and the
    story runs that project's own workflows, not a copy."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "pyproject.toml").is_file() and (candidate / ".github" / "workflows").is_dir():
            return candidate
    raise RuntimeError(
        f"no generated project at or above {here} (a pyproject.toml beside .github/workflows/): "
        "run the stories from the project's root, as `make e2e` and `make story` do"
    )
