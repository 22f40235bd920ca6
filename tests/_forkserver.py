"""A server that imports torch once and forks one child per observed script run.

    python tests/_forkserver.py

Used by `tests/execution.py` (see `run_script`); not a test module itself. Importing torch
takes about half of a small script's run, and the execution tests run hundreds of scripts:
the server pays it once. It reads one JSON request per line on standard input,

    {"id": 7, "cwd": ..., "env": {...}, "argv": [OUT.json, SCRIPT, ARGS...],
     "stdout": PATH, "stderr": PATH}                    run a script
    {"kill": 7}                                          kill that run (a timeout)

forks, and the child runs `_bootstrap.main(argv)` exactly as `python tests/_bootstrap.py
argv...` would, with the request's working directory and environment and its standard output
and error sent to the given files. When a child ends, the server writes
`{"id": 7, "returncode": N}` (negative: killed by that signal). Nothing here runs a torch
operation, so no OpenMP thread pool exists before a fork.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys

import _bootstrap
import torch._dynamo  # noqa: F401  (torch with it, for each fork; every optimizer imports it)


def _child(request: dict) -> None:
    """In the forked child: become the observed run, then exit with its status."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115
        code = _bootstrap.main(request["argv"])
    except BaseException:  # the bootstrap reports the script's own errors; this is its own
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    children: dict[int, int] = {}  # pid -> request id
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    requests = sys.stdin.fileno()
    selector.register(requests, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    pending = b""  # read but not yet handled: one read may bring several requests
    open_input = True
    while open_input or children:
        for key, _ in selector.select():
            if key.fd == requests:
                data = os.read(requests, 65536)
                if not data:
                    open_input = False
                    selector.unregister(requests)
                    continue
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    _handle(json.loads(line), children)
            else:
                os.read(wake_read, 512)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            ident = children.pop(pid, None)
            if ident is not None:
                print(json.dumps({"id": ident, "returncode": os.waitstatus_to_exitcode(status)}),
                      flush=True)


def _handle(request: dict, children: dict[int, int]) -> None:
    """Fork a child for a run request, or kill the child of a kill request."""
    if "kill" in request:
        for pid, ident in children.items():
            if ident == request["kill"]:
                os.kill(pid, signal.SIGKILL)
        return
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(request)
    children[pid] = request["id"]


if __name__ == "__main__":
    serve()
