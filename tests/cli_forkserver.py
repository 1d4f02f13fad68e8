"""A fork server for the `tht` command, used by the fault batteries.

Each request (one JSON line on stdin: args, env, stdout and stderr paths) runs in a
fresh child process forked from this pre-imported parent: the child has its own
connections, its own hold on the embedded index and its own exit, exactly like
`python -m tht ...` (it calls the same entry point, ``tht.cli.entry.main``), without
paying the ~1.5 s of imports each time. The parent never opens a connection or an
index, and runs with one thread, so forking it is safe. Answers one JSON line per
request: {"code": exit code of the child}.

    python tests/cli_forkserver.py
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # numpy's BLAS pool would be a second thread

import json
import sys

import tht.bootstrap
import tht.cli.main
import tht.memory.embedding.hashing
import tht.memory.recall_service  # noqa: F401
from tht.cli.entry import main


def _child(request: dict) -> None:
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    try:
        code = main(request["args"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # pragma: no cover - reported through the exit code
        code = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve() -> None:
    answer = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answer.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        answer.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
        answer.flush()


if __name__ == "__main__":
    serve()
