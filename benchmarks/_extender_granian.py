"""The extender's App served by granian instead of kubesage's own HTTP server.

Issue 19 asks whether a maintained server (granian: Rust HTTP, Python app) would do
as well as :mod:`kubesage.core.k8s.http_server`. ``benchmarks/extender.py --server
granian`` measures it through :func:`granian_server`, which runs this file as a
process: the same embedded service as ``kubesage serve --embedded`` (the synthetic
cluster pre-loaded by FGD, the control loop ticking, the garbage collector settled
after start-up as it does), the same :class:`~kubesage.core.k8s.server.App`, but
served by granian's embedded server, one worker on the process's uvloop event loop.

Interfaces: ``rsgi`` (the default; granian's own protocol, its fastest path) through
:class:`RsgiApp`, a thin adapter doing what the in-house server does per request
(route lookup, read the body, run the endpoint on the loop or in the thread pool,
write the reply's bytes, then run its ``after`` work — filter's prescore — on the
loop); or ``asgi``, the App's own ASGI 3 interface.

    python benchmarks/_extender_granian.py --port 8000 [--nodes 10000] [--interface asgi]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STARTUP_S = 600.0
"""Deadline for the server to answer /healthz (a 10,000-node cluster fills first)."""


class RsgiApp:
    """:class:`~kubesage.core.k8s.server.App` as an RSGI application."""

    def __init__(self, app: Any):
        self.app = app

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        from kubesage.core.k8s.server import Reply, run_after

        started = time.perf_counter()
        found = self.app.find(scope.method, scope.path)
        if isinstance(found, Reply):
            reply = found
        else:
            body = await protocol()
            if len(body) > self.app.max_body_bytes:
                reply = self.app.too_large(found, None, started)
            elif found.threaded:
                loop = asyncio.get_running_loop()
                reply = await loop.run_in_executor(None, self.app.run, found, body, started)
            else:
                reply = self.app.run(found, body, started)
        headers = [("content-type", reply.content_type), *reply.headers]
        protocol.response_bytes(reply.status, headers, reply.body)
        if reply.after is not None:
            # Next loop iteration, as the in-house server does: the answer leaves first.
            asyncio.get_running_loop().call_soon(run_after, reply.after)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def granian_server(nodes: int, *, fill: float, tick_s: float) -> Iterator[int]:
    """This file as a process serving ``nodes`` nodes on a free port; yields the port
    once /healthz answers 200; terminates it after."""
    port = free_port()
    command = [
        sys.executable, str(HERE / "_extender_granian.py"), "--port", str(port),
        "--nodes", str(nodes), "--fill", str(fill), "--tick-s", str(tick_s),
    ]  # fmt: skip
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            _wait_until_healthy(process, port, log)
            yield port
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_healthy(process: subprocess.Popen[bytes], port: int, log: Any) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise SystemExit(f"error: the granian server exited:\n{log.read()[-2000:]}")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.2)
    raise SystemExit("error: the granian server did not come up in time")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--fill", type=float, default=0.5)
    parser.add_argument("--tick-s", type=float, default=1.0)
    parser.add_argument("--interface", choices=["rsgi", "asgi"], default="rsgi")
    args = parser.parse_args()

    import uvloop
    from granian.constants import HTTPModes, Interfaces
    from granian.log import LogLevels
    from granian.server.embed import Server

    from kubesage.core import gc_pauses
    from kubesage.core.cli.loop import loop_inputs
    from kubesage.core.cli.serve_services import DEFAULT_POLICY, embedded_service
    from kubesage.core.k8s.server import create_app
    from kubesage.core.observability.logging import configure_logging

    configure_logging("info")
    # As `kubesage serve --embedded --tick-s T` builds it.
    settings, _ = loop_inputs(
        policy=DEFAULT_POLICY, embedded=True, kubeconfig=None, context=None, tick_s=args.tick_s
    )
    service = embedded_service(DEFAULT_POLICY, nodes=args.nodes, fill=args.fill, loop=settings)
    assert service.loop is not None
    app = create_app(
        service.extender,
        mutate=service.mutate,
        health=service.health,
        bind_waits_on_io=service.bind_waits_on_io,
        loop=service.loop.debug,
    )
    gc_pauses.settle()
    rsgi = args.interface == "rsgi"
    server = Server(
        RsgiApp(app) if rsgi else app,
        address="127.0.0.1",
        port=args.port,
        interface=Interfaces.RSGI if rsgi else Interfaces.ASGINL,
        http=HTTPModes.http1,
        websockets=False,
        log_level=LogLevels.warning,
    )
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(server.serve())
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
