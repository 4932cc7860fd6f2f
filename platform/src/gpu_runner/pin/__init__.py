"""The project's pin of this platform: which commit of which repository its pyproject.toml, uv.lock and
workflows name, and `gpu-runner platform-update`, which moves all of them together (issue 31)."""
