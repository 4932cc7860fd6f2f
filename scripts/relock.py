"""Regenerate `{{cookiecutter.project_slug}}/uv.lock`, the generated project's lock file.

uv.lock names the project itself (and its extras in conflict markers), so the template stores it with those
places written as Jinja: bake the defaults, lock, then put the Jinja back. `make relock` runs this; the
template tests run `uv lock --check` inside baked projects, so a stale lock fails CI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_LOCK = ROOT / "{{cookiecutter.project_slug}}" / "uv.lock"
SLUG = "{{ cookiecutter.project_slug }}"
TEMPLATE_PYPROJECT = ROOT / "{{cookiecutter.project_slug}}" / "pyproject.toml"
# The bake's pin on the platform (issue 31):
# gpu-runner = { git = "<url>", rev = "<sha>", subdirectory = "platform" }.
PLATFORM_SOURCE = re.compile(r'^gpu-runner = \{ git = "([^"]+)", rev = "([0-9a-f]{40})"', flags=re.MULTILINE)


def platform_env() -> dict[str, str]:
    """The environment for `uv lock`: git fetches the pinned platform commit from this checkout (insteadOf),
    so relocking needs neither network nor access to the template's GitHub repository (the commit must be
    in this checkout's history)."""
    found = PLATFORM_SOURCE.search(TEMPLATE_PYPROJECT.read_text(encoding="utf-8"))
    if not found:
        raise SystemExit(f"{TEMPLATE_PYPROJECT.relative_to(ROOT)} pins no gpu-runner git source")
    url, rev = found.groups()
    subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}^{{commit}}"], check=True)
    return {
        **os.environ,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.file://{ROOT}.insteadOf",
        "GIT_CONFIG_VALUE_0": url,
    }


def templatize(lock_text: str, slug: str) -> str:
    """Replace the baked slug by its Jinja expression, including uv's `extra-<len>-<name>-<extra>` markers."""
    marker = re.compile(rf"extra-{len(slug)}-{re.escape(slug)}-")
    text = marker.sub(f"extra-{{{{ cookiecutter.project_slug | length }}}}-{SLUG}-", lock_text)
    text = text.replace(f'"{slug}"', f'"{SLUG}"')
    if slug in text:
        raise SystemExit(f"uv.lock still mentions '{slug}' somewhere the template does not handle")
    return text


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=tmp))
        (project / "uv.lock").unlink(missing_ok=True)
        subprocess.run(["uv", "lock"], cwd=project, check=True, env=platform_env())
        slug = project.name
        TEMPLATE_LOCK.write_text(templatize((project / "uv.lock").read_text(), slug))
    print(f"wrote {TEMPLATE_LOCK.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
