"""The probes and metrics server: `/healthz`, `/readyz` and `/metrics` over plain HTTP."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from manager.runtime.metrics import Metrics, current_metrics


def make_probe_app(*, ready: Callable[[], tuple[bool, str]], metrics: Metrics | None = None) -> web.Application:
    """`ready()` says whether the process should receive work, and if not, why; `/metrics`
    serves `metrics` (the current process's by default)."""
    served = metrics or current_metrics()

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
