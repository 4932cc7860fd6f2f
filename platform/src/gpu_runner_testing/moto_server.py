"""The moto server the tests run (`python -m gpu_runner_testing.moto_server`, moto_server's own arguments), with
S3's conditional PutObject made atomic.

moto 5.2.5 checks `If-None-Match: *` and `If-Match` against the bucket and then stores the object, two steps with
no lock between them (moto/s3/responses.py, S3Response.put_object), while its server answers requests on many
threads. Two racing conditional writes of one key could then both succeed, which S3 never allows: of concurrent
conditional writes to one key, one succeeds and the others fail with 412 or 409 (Amazon S3 User Guide, "How to
prevent object overwrites with conditional writes"). A sweep's study journal relies on it, and its two-writer
test once lost a tell that way (a journal object overwritten; trial 17 left RUNNING). Here every PutObject holds
one lock from the check to the store; nothing else changes.
"""

from __future__ import annotations

import threading
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_PUT = threading.Lock()
_put_object = S3Response.put_object


def _atomic_put_object(self: S3Response) -> Any:  # moto's TYPE_RESPONSE tuple
    with _PUT:
        return _put_object(self)


def run(argv: list[str] | None = None) -> None:
    S3Response.put_object = _atomic_put_object  # type: ignore[method-assign]
    main(argv)


if __name__ == "__main__":
    run()
