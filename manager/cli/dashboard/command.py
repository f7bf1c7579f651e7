"""`kfed dashboard [--port N] [--no-browser]`: the dashboard on 127.0.0.1, reading as the user of
the kubeconfig (like every other command), until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import signal
import socket
import webbrowser
from typing import Any

from manager.cli.fleet import CommandError, add_cluster_options, context_namespace, kubeconfig_path, manager_client, run_async

DEFAULT_PORT = 8765


def listen(port: int) -> socket.socket:
    """The loopback socket to serve on; a port in use is one line naming the fix."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as err:
        sock.close()
        why = "it is in use" if err.errno == errno.EADDRINUSE else (err.strerror or str(err))
        raise CommandError(f"cannot listen on 127.0.0.1:{port}: {why} (choose another with --port, or --port 0 for any)") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


@run_async
async def cmd_dashboard(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port {args.port}: expected a port number from 0 to 65535")
    from aiohttp import web

    from manager.cli.dashboard.reading import Session
    from manager.cli.dashboard.server import LocalAccess, Settings, create_app

    sock = listen(args.port)
    client = await manager_client(args)
    port = sock.getsockname()[1]
    settings = Settings(LocalAccess(Session(client, default_namespace=context_namespace(args))))
    settings.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
    runner = web.AppRunner(create_app(settings), access_log=None, shutdown_timeout=1.0)
    stop = asyncio.Event()
    try:
        await runner.setup()
        await web.SockSite(runner, sock).start()
        url = f"http://127.0.0.1:{port}/"
        print(f"kfed dashboard: {url} (reading as the user of {kubeconfig_path(args)}; Ctrl-C stops it)", flush=True)
        if not args.no_browser:
            await asyncio.get_running_loop().run_in_executor(None, _open, url)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    finally:
        await runner.cleanup()
        await client.close()
        sock.close()


def _open(url: str) -> None:
    """A browser where there is one; none is no error (the URL was printed)."""
    with contextlib.suppress(webbrowser.Error):
        webbrowser.open(url)


def add_command(commands: Any) -> None:
    parser = commands.add_parser("dashboard", help="the fleet, queues and jobs in a browser, on 127.0.0.1, as you")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the port on 127.0.0.1 (default {DEFAULT_PORT}; 0 for any free one)"
    )
    parser.add_argument("--no-browser", action="store_true", help="print the URL without opening a browser")
    add_cluster_options(parser, watch=False)
    parser.set_defaults(func=cmd_dashboard)
