"""`kfed dev up|down|status`: a whole federation on this machine, from one command."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import yaml

from manager.cli.files import checkout_crds_dir
from manager.dev import catalog, controllers, federation
from manager.dev.binaries import REPO_ROOT, BinariesError, binary_dir
from manager.dev.local import ClusterError, Component, LocalCluster, LocalProvider, free_port, pid_alive

DEFAULT_DIR = Path(os.environ.get("KFED_DEV_DIR", Path.home() / ".kfed" / "dev"))


def _progress(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def _state_file(directory: Path) -> Path:
    return directory / "state.json"


def _read_state(directory: Path) -> dict[str, Any] | None:
    path = _state_file(directory)
    if not path.exists():
        return None
    loaded = json.loads(path.read_text())
    return loaded if isinstance(loaded, dict) else None


def cmd_up(args: argparse.Namespace) -> int:
    directory = Path(args.dir).expanduser().resolve()
    state = _read_state(directory)
    if state and any(pid_alive(pid) for cluster in state["clusters"] for pid in cluster["pids"].values() if pid):
        print(f"a federation is already running in {directory}; run `kfed dev down --dir {directory}` first", file=sys.stderr)
        return 1
    if args.workers < 1:
        print("--workers must be at least 1", file=sys.stderr)
        return 1
    try:
        integrations = federation.parse_integrations(args.integrations)
    except ValueError as err:
        print(f"kfed dev up: {err}", file=sys.stderr)
        return 1
    started = time.monotonic()
    _progress("locating or building the control-plane binaries (the first build takes several minutes)")
    try:
        bin_dir = binary_dir()
        prepared: list[tuple[catalog.LocalController, Path]] = []
        for controller in catalog.serving(integrations):
            _progress(f"locating or building {controller.build.what} (the first build takes a few minutes)")
            prepared.append((controller, catalog.controller_dir(controller)))
    except BinariesError as err:
        print(f"kfed dev up: {err}", file=sys.stderr)
        return 1
    clusters_dir = directory / "clusters"
    if clusters_dir.exists():
        shutil.rmtree(clusters_dir)
    provider = LocalProvider(clusters_dir, bin_dir=bin_dir)
    names = ["manager", *(f"worker{i}" for i in range(1, args.workers + 1))]
    _progress(f"starting {len(names)} clusters ({', '.join(names)}){' with Job controllers and kwok nodes' if args.jobs else ''}")
    try:
        clusters = provider.create(names, jobs=args.jobs, aggregation=True)  # the manager serves the visibility API
        manager, workers = clusters[0], clusters[1:]
        _progress("installing CRDs and the federation's queues")
        # A playground should not need Kueue's chore of mirroring namespaces and LocalQueues
        # onto every worker: the manager propagates them (and its credential may).
        federation.install(manager, workers, federation.crd_manifests(checkout_crds_dir()), propagate_queues=True)
        for controller, controller_bin in prepared:
            _progress(f"installing {controller.installs}")
            controller.install(controller_bin, clusters=clusters, workers=workers)
    except ClusterError as err:
        provider.delete_all()
        print(f"kfed dev up: {err}", file=sys.stderr)
        return 1
    try:
        _progress("starting kfed's controllers: python -m manager on the manager, python -m worker_agent on each worker")
        config_file = directory / "kfed-configuration.yaml"
        config_file.write_text(yaml.safe_dump(federation.kfed_configuration(integrations, propagate_queues=True), sort_keys=False))
        for cluster in clusters:
            start_controller(cluster, "manager" if cluster is manager else "worker_agent", config_file=config_file)
    except ClusterError as err:
        provider.delete_all()
        print(f"kfed dev up: {err}", file=sys.stderr)
        return 1
    for cluster in clusters:
        shutil.copyfile(cluster.kubeconfig_path, directory / f"{cluster.name}.kubeconfig")
        (directory / f"{cluster.name}.kubeconfig").chmod(0o600)
    _state_file(directory).write_text(json.dumps({"clusters": [c.state() for c in clusters]}, indent=2))
    print(
        federation.next_steps(
            elapsed=time.monotonic() - started,
            directory=directory,
            workers=len(workers),
            jobs=args.jobs,
            repo_root=REPO_ROOT if (REPO_ROOT / "examples").is_dir() else None,
            cwd=Path.cwd(),
            path_dirs=_path_dirs(bin_dir),
            integrations=integrations,
        )
    )
    return 0


def _path_dirs(bin_dir: Path) -> list[Path]:
    """Where pip put this `kfed` (`.venv/bin`), and the control plane's `kubectl` when the shell has none."""
    dirs = [Path(sysconfig.get_path("scripts"))]
    if shutil.which("kubectl") is None:
        dirs.append(bin_dir)
    return dirs


def start_controller(cluster: LocalCluster, component: str, *, config_file: Path) -> Component:
    """Run kfed's controller process for one cluster, with its log beside the cluster's others
    and `config_file` as its Configuration."""
    federation.create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": federation.SYSTEM_NAMESPACE}})
    health, webhook = free_port(), free_port()
    extra = [f"--config={config_file}"]
    if component == "manager":
        # Kueue's visibility API through the manager's apiserver (kubectl get --raw /apis/visibility.kueue.x-k8s.io/...).
        federation.create(cluster, federation.visibility_service())
        extra += federation.visibility_flags(free_port())
    argv = federation.controller_argv(
        cluster,
        component,
        health_port=health,
        webhook_port=webhook,
        cert_dir=cluster.directory / "webhook-certs",
        extra=tuple(extra),
    )
    # Supervised, as a Deployment would be: a controller that exits (a lost lease after its
    # apiserver froze) is started again with backoff, and each restart is logged.
    return controllers.start_supervised(cluster, component, argv, health_port=health)


def _cluster_from_state(entry: dict[str, Any]) -> LocalCluster:
    cluster = LocalCluster(entry["name"], Path(entry["directory"]), Path("."), jobs=entry["jobs"])
    cluster.apiserver_port = int(entry["server"].rsplit(":", 1)[1])
    cluster.etcd_port = entry["etcdPort"]
    # Only the process ids are needed to stop or inspect what `dev up` started.
    for name, pid in entry["pids"].items():
        component = Component(name, [], Path(entry["logs"][name]))
        component.pid = pid
        cluster.components[name] = component
    return cluster


def _running_federation(args: argparse.Namespace, *, hint: str = "") -> tuple[Path, dict[str, Any]] | None:
    """The directory of `--dir` and the state of the federation running there; None (said on
    stderr, with `hint`) when there is none."""
    directory = Path(args.dir).expanduser().resolve()
    state = _read_state(directory)
    if state is None:
        print(f"no federation in {directory}{hint}", file=sys.stderr)
        return None
    return directory, state


def cmd_down(args: argparse.Namespace) -> int:
    found = _running_federation(args)
    if found is None:
        return 0
    directory, state = found
    for entry in state["clusters"]:
        _cluster_from_state(entry).stop()
        print(f"stopped {entry['name']}")
    _state_file(directory).unlink()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    found = _running_federation(args, hint="; start one with `kfed dev up`")
    if found is None:
        return 1
    _, state = found
    healthy = True
    print(f"{'CLUSTER':<10} {'SERVER':<26} {'APISERVER':<10} PROCESSES")
    for entry in state["clusters"]:
        cluster = _cluster_from_state(entry)
        alive = {name: bool(c.pid and pid_alive(c.pid)) for name, c in cluster.components.items()}
        try:
            ready = cluster.request("GET", "/readyz", timeout=2)[0] == 200
        except OSError:
            ready = False
        healthy &= ready and all(alive.values())
        processes = ", ".join(f"{name}={'up' if up else 'DOWN'}" for name, up in alive.items())
        print(f"{entry['name']:<10} {entry['server']:<26} {'ready' if ready else 'NOT READY':<10} {processes}")
    return 0 if healthy else 1


def add_commands(commands: Any) -> None:
    dev = commands.add_parser("dev", help="run a federation of real local clusters on this machine")
    sub = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)
    up = sub.add_parser("up", help="start a manager and N worker clusters, ready to take Jobs")
    up.add_argument("--workers", type=int, default=2)
    up.add_argument("--jobs", action="store_true", help="also run Job controllers, a scheduler and kwok nodes")
    up.add_argument(
        "--integrations",
        default=federation.JOB_INTEGRATION,
        metavar="NAME[,NAME]",
        help=f"job kinds besides batch/v1 Job (always on), by short name ({', '.join(federation.INTEGRATIONS)}) or Kueue's "
        "framework name; jobset (lws, mpijob) installs JobSet's (LeaderWorkerSet's, MPIJob's) CRD everywhere and runs its "
        "controller (the MPI Operator) on each worker, rayjob and raycluster KubeRay's CRDs and operator; pods (and an "
        "MPIJob's launcher) run with --jobs",
    )
    up.add_argument("--dir", default=str(DEFAULT_DIR))
    up.set_defaults(func=cmd_up)
    down = sub.add_parser("down", help="stop every process of the federation")
    down.add_argument("--dir", default=str(DEFAULT_DIR))
    down.set_defaults(func=cmd_down)
    status = sub.add_parser("status", help="list the clusters and their health")
    status.add_argument("--dir", default=str(DEFAULT_DIR))
    status.set_defaults(func=cmd_status)
