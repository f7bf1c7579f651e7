"""`kfed dashboard [--port N] [--no-browser]`: the dashboard on 127.0.0.1, reading as the user of
the kubeconfig (like every other command), until Ctrl-C.

`kfed dashboard --in-cluster`: the dashboard of the manager's installation (its own Deployment in
the chart and in `deploy/dashboard`), for every user who brings a bearer token, each read and
action checked for that user (`incluster.py`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import signal
import socket
import ssl
import webbrowser
from typing import Any

from manager.cli.dashboard.history import SAMPLE_SECONDS
from manager.cli.fleet import CommandError, add_cluster_options, context_namespace, kubeconfig_path, manager_client, run_async

DEFAULT_PORT = 8765


def listen(port: int, address: str = "127.0.0.1") -> socket.socket:
    """The socket to serve on; a port in use is one line naming the fix."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as err:
        sock.close()
        why = "it is in use" if err.errno == errno.EADDRINUSE else (err.strerror or str(err))
        raise CommandError(f"cannot listen on {address}:{port}: {why} (choose another with --port, or --port 0 for any)") from None
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

    if not args.in_cluster and args.address and not _loopback(args.address):
        raise CommandError(
            f"--address {args.address}: kfed dashboard serves your own credentials, so only on a loopback address "
            "(127.0.0.1); to serve others, run it in the cluster (--in-cluster), where each user signs in"
        )
    if not args.sample_every > 0:
        raise CommandError(f"--sample-every {args.sample_every:g}: expected a number of seconds above 0")
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        raise CommandError("--tls-cert-file and --tls-key-file go together")
    if args.in_cluster:
        from manager.cli.dashboard import incluster
        from manager.controllers.visibility import VisibilityServer
        from manager.kube.client import KubeClient

        client = await manager_client(args) if args.kubeconfig else await KubeClient.in_cluster(name="kfed-dashboard")
        access = incluster.ClusterAccess(client, VisibilityServer(client, lambda name: None, dict))
        settings = Settings(access, secure_cookies=bool(args.tls_cert_file), extra_routes=[incluster.routes(access)], recorder=client)
        address = args.address or "0.0.0.0"
        who = "each user's bearer token, checked with SubjectAccessReview"
    else:
        client = await manager_client(args)
        settings = Settings(LocalAccess(Session(client, default_namespace=context_namespace(args))), recorder=client)
        address = args.address or "127.0.0.1"
        who = f"the user of {kubeconfig_path(args)}"
    try:
        sock = listen(args.port, address)
    except CommandError:
        await client.close()
        raise
    port = sock.getsockname()[1]
    settings.sample_every = args.sample_every
    if not args.in_cluster:
        settings.hosts = frozenset({f"{address}:{port}", f"localhost:{port}"})
    context = None
    if args.tls_cert_file:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(args.tls_cert_file, args.tls_key_file)
        except (OSError, ssl.SSLError) as err:
            sock.close()
            await client.close()
            raise CommandError(f"cannot load --tls-cert-file/--tls-key-file: {err}") from None
    runner = web.AppRunner(create_app(settings), access_log=None, shutdown_timeout=1.0)
    stop = asyncio.Event()
    try:
        await runner.setup()
        await web.SockSite(runner, sock, ssl_context=context).start()
        url = f"{'https' if context else 'http'}://{address}:{port}/"
        print(f"kfed dashboard: {url} (reading as {who}; Ctrl-C stops it)", flush=True)
        if not args.no_browser and not args.in_cluster:
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


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


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
    parser.add_argument(
        "--in-cluster",
        action="store_true",
        help="serve every user who brings a bearer token, checking each read and action for them (the chart's dashboard)",
    )
    parser.add_argument("--address", help="the address to listen on (default 127.0.0.1; 0.0.0.0 with --in-cluster)")
    parser.add_argument(
        "--sample-every",
        type=float,
        default=SAMPLE_SECONDS,
        metavar="SECONDS",
        help=f"how often the Queues view's plots read the ClusterQueues and Workloads (default {SAMPLE_SECONDS:g})",
    )
    parser.add_argument("--tls-cert-file", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key-file", help="the certificate's private key (PEM)")
    add_cluster_options(parser, watch=False)
    parser.set_defaults(func=cmd_dashboard)
