"""HTTP servers as runnables, and the probes and metrics app: `/healthz`, `/readyz` and
`/metrics` over plain HTTP."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from aiohttp import web

from manager.runtime.metrics import Metrics
from manager.runtime.runnables import Runnable, always

# aiohttp waits up to a minute for open connections on cleanup (the apiserver keeps webhook
# connections open); a process that lost its lease must exit well within that.
SHUTDOWN_SECONDS = 2.0


class HttpServer:
    """An aiohttp app served by a runnable, as controller-runtime's webhook and metrics servers
    are. The socket is bound when the server is made, so a taken port fails the start at once
    and the chosen port (for `:0`) is known before anything is told where to call."""

    def __init__(self, name: str, app: web.Application, address: str, *, ssl_context: ssl.SSLContext | None = None) -> None:
        host, port = split_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.name = name
        self.app = app
        self.ssl_context = ssl_context
        self.socket = socket.create_server((host, port), family=family, reuse_port=False)
        self.port = int(self.socket.getsockname()[1])

    def runnable(self) -> Runnable:
        """Every replica serves (probes, metrics, webhooks)."""
        return always(self.name, self.serve)

    async def serve(self) -> None:
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS)
        await runner.setup()
        try:
            await web.SockSite(runner, self.socket, ssl_context=self.ssl_context).start()
            await asyncio.Event().wait()  # until cancelled: the process stops
        finally:
            await runner.cleanup()
            self.socket.close()


def make_probe_app(*, ready: Callable[[], tuple[bool, str]], metrics: Metrics) -> web.Application:
    """`ready()` says whether the process should receive work, and if not, why; `/metrics`
    serves the process's `metrics`."""
    served = metrics

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        ok, why = ready()
        return web.Response(text="ok" if ok else why, status=200 if ok else 503)

    async def scrape(request: web.Request) -> web.Response:
        body, content_type = served.render(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", scrape)
    return app


def split_address(address: str, *, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """`host:port` or `:port` to (host, port); port 0 picks a free one."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"{address!r}: expected host:port")
    return host.strip("[]") or default_host, int(port)
