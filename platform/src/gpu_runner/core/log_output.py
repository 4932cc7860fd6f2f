"""Where the package's log lines go when it runs as a command (`gpu-runner`, `python -m gpu_runner.core.offerings`).

Every module logs to its own `logging.getLogger(__name__)`; until issue 14 they took a `log=print` parameter, and
the workflows' step logs show those lines. So a command sends them to stdout exactly as `print` wrote them: the
message alone, one line each. The reaper Lambda does not use this: Lambda's runtime owns the root logger there
(reaper_lambda.show_info_lines).
"""

from __future__ import annotations

import logging

# The distribution's top package, whose logger every module's `logging.getLogger(__name__)` descends from.
PACKAGE = (__package__ or "gpu_runner").split(".")[0]


class PrintHandler(logging.Handler):
    """Each record as `print` writes it: the message alone, on sys.stdout as it is at that moment (tests swap
    sys.stdout between calls)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record))
        except Exception:
            self.handleError(record)


def to_stdout() -> None:
    """The package's INFO lines and above to stdout. Idempotent: a second call adds no second handler.
    github.py's INFO lines were never shown (nothing configured logging before) and stay hidden."""
    package = logging.getLogger(PACKAGE)
    if not any(isinstance(handler, PrintHandler) for handler in package.handlers):
        package.addHandler(PrintHandler())
    package.setLevel(logging.INFO)
    logging.getLogger(f"{PACKAGE}.core.github").setLevel(logging.WARNING)
