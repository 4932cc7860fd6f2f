"""Regenerate `{{cookiecutter.project_slug}}/uv.lock`, the generated project's lock file.

uv.lock names the project itself (and its extras in conflict markers), so the template stores it with those
places written as Jinja: bake the defaults, lock, then put the Jinja back. `make relock` runs this; the
template tests run `uv lock --check` inside baked projects, so a stale lock fails CI.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_LOCK = ROOT / "{{cookiecutter.project_slug}}" / "uv.lock"
SLUG = "{{ cookiecutter.project_slug }}"


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
        subprocess.run(["uv", "lock"], cwd=project, check=True)
        slug = project.name
        TEMPLATE_LOCK.write_text(templatize((project / "uv.lock").read_text(), slug))
    print(f"wrote {TEMPLATE_LOCK.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
