"""The composition root of one cluster's controllers, shared by `python -m manager` and
`python -m worker_agent`: caches, admission, Job integration, webhooks, probes and metrics,
leader election and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import signal
import ssl
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiohttp import web
from pydantic import ValidationError

from manager.api.config import Configuration, ControllerMetrics, parse_duration, parse_feature_gates
from manager.api.manifest import pydantic_field_errors
from manager.controllers.admission import AdmissionController
from manager.controllers.caches import Caches
from manager.controllers.events import EventRecorder
from manager.controllers.jobs import JobController
from manager.controllers.visibility import VISIBILITY_GROUP, ApiGroup, VisibilityServer, install_api_services
from manager.controllers.webhookcerts import WebhookCertManager
from manager.controllers.webhooks import WebhookEndpoint, install, make_app, queue_uses_multikueue, server_ssl_context
from manager.engine.integrations.registry import Registry, enabled
from manager.engine.selectors import selector_matches
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError
from manager.kube.leader import LeaderElector
from manager.runtime import logs
from manager.runtime.certs import ServingCert, ensure_serving_cert, trusts
from manager.runtime.metrics import ROLE_FOLLOWER, ROLE_LEADER, ROLE_STANDALONE, LocalQueueRef, Metrics
from manager.runtime.options import Options
from manager.runtime.runnables import Runnable, RunnableGroups, always, leader
from manager.runtime.server import HttpServer, make_probe_app

log = logging.getLogger("kfed")

EXIT_LOST_LEADERSHIP = 3
EXIT_RUNNABLE_FAILED = 1
INSTALL_RETRY_FIRST, INSTALL_RETRY_MAX = 1.0, 60.0  # seconds, doubling


def service_dns_names(ref: str) -> tuple[str, str]:
    """The names a Service (`namespace/name`) is called by inside the cluster, for a certificate."""
    namespace, _, name = ref.partition("/")
    return f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"


def load_configuration(path: str | None, feature_gates: str = "") -> Configuration:
    """The --config file's Configuration (Kueue's defaults without one), with `--feature-gates`
    over its featureGates, as Kueue's flag is."""
    if not path:
        config = Configuration()
    else:
        data = yaml.safe_load(Path(path).read_text())
        try:
            config = Configuration.model_validate(data or {})
        except ValidationError as err:  # one line naming each field, as for a manifest
            raise ValueError(f"{path}: " + "; ".join(str(e) for e in pydantic_field_errors(err))) from None
    gates = parse_feature_gates(feature_gates)
    if gates:
        config.feature_gates = {**(config.feature_gates or {}), **gates}
    return config


def job_integrations(config: Configuration) -> Registry:
    """The job kinds this process integrates (`integrations.frameworks`); an unknown name is
    a one-line ValueError naming the field."""
    return enabled(config.effective_frameworks)


def process_metrics(config: Configuration, local_queue_labels: Callable[[LocalQueueRef], dict[str, str] | None]) -> Metrics:
    """The process's metrics, with the optional Kueue groups its Configuration's `metrics`
    section asks for (Kueue's defaults: LocalQueue metrics on for every LocalQueue, ClusterQueue
    resource metrics off)."""
    settings = config.metrics or ControllerMetrics()
    local = settings.local_queue_metrics
    selector = local.local_queue_selector if local is not None else None

    def selected(lq: LocalQueueRef) -> bool:
        labels = local_queue_labels(lq)
        return labels is not None and (selector is None or selector_matches(selector, labels))

    return Metrics(
        local_queue_metrics=local is None or local.enable,
        cluster_queue_resources=settings.enable_cluster_queue_resources,
        local_queue_filter=selected,
    )


async def _client(opts: Options, component: str) -> KubeClient:
    if opts.kubeconfig:
        kubeconfig = yaml.safe_load(Path(opts.kubeconfig).read_text())
        return await KubeClient.from_kubeconfig(
            kubeconfig, name=component, context=opts.context, qps=opts.qps, burst=opts.burst, where=f"--kubeconfig {opts.kubeconfig}"
        )
    return await KubeClient.in_cluster(name=component, qps=opts.qps, burst=opts.burst)


class Extension(Protocol):
    """More controllers for one process (the manager's MultiKueue), built once the client and
    the caches exist: its informers are started and waited for with the process's own, and its
    runnables join the process's groups."""

    informers: list[Any]
    # More API groups for the manager's aggregated API server (kfed's read API), served beside
    # Kueue's visibility API when it is on.
    api_groups: list[ApiGroup]

    def runnables(self) -> list[Runnable]: ...

    async def stop(self) -> None: ...


ExtensionFactory = Callable[["Process"], Extension]


class Process:
    """Everything one process runs; `run()` returns the exit code."""

    def __init__(
        self,
        opts: Options,
        *,
        component: str,
        extensions: Sequence[ExtensionFactory] = (),
        release_unowned_evictions: bool = False,
    ) -> None:
        self.opts = opts
        self.component = component
        # Kueue's lifecycle keeps an evicted Workload's quota until its QuotaReserved turns False
        # (see `AdmissionState`); the worker agent releases a remote copy no job owns at once.
        self.release_unowned_evictions = release_unowned_evictions
        self.extension_factories = list(extensions)
        self.cert_manager: WebhookCertManager | None = None
        self.ssl_context: ssl.SSLContext | None = None
        self.extensions: list[Extension] = []
        self.stop = asyncio.Event()
        self.servers: list[HttpServer] = []
        self.groups = RunnableGroups(on_failure=lambda name, err: self.stop.set())
        self.webhook_endpoint: WebhookEndpoint | None = None
        self._endpoint_changed = asyncio.Event()
        self._stored_trust: list[bytes] = []
        self.visibility: VisibilityServer | None = None
        self.visibility_context: ssl.SSLContext | None = None  # the caBundles the apiserver stored at the last install

    def _ready(self) -> tuple[bool, str]:
        if not self.caches.synced() or not all(i.synced.is_set() for e in self.extensions for i in e.informers):
            return False, "caches not synced"
        return True, "ok"

    def _serve(self, name: str, app: web.Application, address: str, ssl_context: ssl.SSLContext | None = None) -> int:
        """Serve `app` on `address` as one of the process's runnables; returns the bound port."""
        server = HttpServer(name, app, address, ssl_context=ssl_context)
        self.servers.append(server)
        self.groups.add(server.runnable())
        return server.port

    async def _start_webhooks(self) -> None:
        opts = self.opts
        cert_dir = Path(opts.webhook_cert_dir) if opts.webhook_cert_dir else Path(tempfile.mkdtemp(prefix="kfed-webhook-"))
        names: tuple[str, ...] = ("localhost",)
        if opts.webhook_service:
            names = (*service_dns_names(opts.webhook_service), *names)
        if opts.visibility_address:
            # One certificate for the manager's TLS servers: the aggregated API's Service too.
            names = (*names, *service_dns_names(opts.visibility_service))
        ips = ("127.0.0.1",)
        if opts.webhook_cert_secret:
            # Every replica serves the certificate kept in one Secret (made and rotated by kfed).
            self.cert_manager = WebhookCertManager(
                self.client,
                namespace=opts.namespace,
                secret=opts.webhook_cert_secret,
                names=names,
                ips=ips,
                directory=cert_dir,
                validity=parse_duration(opts.webhook_cert_validity),
                rotate_before=parse_duration(opts.webhook_cert_rotate_before),
                check_interval=opts.webhook_cert_check_interval,
                on_change=self._certificate_changed,
                trusted=self._trusted_by_configurations,
            )
            cert = await self.cert_manager.ensure()
            self.groups.add(*self.cert_manager.runnables())
        else:
            cert = ensure_serving_cert(cert_dir, names=names, ips=ips)
        context = server_ssl_context(str(cert.cert_file), str(cert.key_file))
        self.ssl_context = context

        uses_multikueue = functools.partial(queue_uses_multikueue, self.caches, self.client)
        app = make_app(uses_multikueue=uses_multikueue, adapters=self.integrations.webhooked)
        port = self._serve("webhook-server", app, opts.webhook_address, context)
        if opts.webhook_service:
            namespace, _, name = opts.webhook_service.partition("/")
            self.webhook_endpoint = WebhookEndpoint(cert.ca_pem, service_namespace=namespace, service_name=name)
        else:
            url = opts.webhook_url or f"https://127.0.0.1:{port}"
            self.webhook_endpoint = WebhookEndpoint(cert.ca_pem, url=url)
        log.info("webhooks serving", extra={"port": port})
        if opts.visibility_address:
            await self._start_visibility(cert)
        self.groups.add(leader("webhook-configurations", self._install_webhooks))

    async def _start_visibility(self, cert: ServingCert) -> None:
        """Kueue's visibility API, as an aggregated API server over the admission state."""
        groups = [group for extension in self.extensions for group in extension.api_groups]
        server = VisibilityServer(self.client, self.admission.pending_in_order, lambda: self.admission.state.local_queues, groups)
        try:
            await server.load_request_headers()
        except KubeError as err:
            raise ValueError(f"--visibility-bind-address: cannot read kube-system/extension-apiserver-authentication: {err}") from None
        self.visibility = server
        self.visibility_context = server.ssl_context(str(cert.cert_file), str(cert.key_file))
        port = self._serve("visibility-server", server.app(), self.opts.visibility_address, self.visibility_context)
        log.info("visibility API serving", extra={"port": port, "key": self.opts.visibility_service})

    async def _certificate_changed(self, cert: ServingCert) -> None:
        """A new bundle in the Secret: serve its certificate on new connections, and (the leader)
        give the configurations its trust bundle (the previous, current and next CAs)."""
        assert self.ssl_context is not None and self.webhook_endpoint is not None
        self.ssl_context.load_cert_chain(str(cert.cert_file), str(cert.key_file))
        if self.visibility_context is not None:
            self.visibility_context.load_cert_chain(str(cert.cert_file), str(cert.key_file))
        self.webhook_endpoint = dataclasses.replace(self.webhook_endpoint, ca_bundle=cert.ca_pem)
        log.info("webhook certificate reloaded", extra={"component": self.component})
        self._endpoint_changed.set()

    def _trusted_by_configurations(self, ca_pem: bytes) -> bool:
        """Whether every webhook and conversion configuration, as the apiserver stored it at the
        last install, trusts `ca_pem`."""
        return bool(self._stored_trust) and all(trusts(bundle, ca_pem) for bundle in self._stored_trust)

    async def _install_webhooks(self) -> None:
        """The lease holder keeps the webhook configurations (and the visibility APIServices)
        pointing at the current endpoint and CA bundle: once on winning the lease, then after each
        certificate change. A failed install is tried again with backoff: until it succeeds the
        stored trust is stale, and the certificate rotation waits on it."""
        delay = INSTALL_RETRY_FIRST
        while True:
            self._endpoint_changed.clear()
            if self.webhook_endpoint is not None:
                try:
                    stored = await install(self.client, self.webhook_endpoint, self.integrations.webhooked)
                    if self.opts.visibility_address:
                        namespace, _, name = self.opts.visibility_service.partition("/")
                        stored += await install_api_services(
                            self.client,
                            ca_bundle=self.webhook_endpoint.ca_bundle,
                            namespace=namespace,
                            name=name,
                            port=self.opts.visibility_service_port,
                            groups=self._served_groups(),
                        )
                    self._stored_trust = stored  # only what every configuration holds
                    delay = INSTALL_RETRY_FIRST
                except KubeError as err:
                    log.error("cannot install the webhook configurations and APIServices; trying again", extra={"error": str(err)})
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._endpoint_changed.wait(), timeout=delay)  # a change, or the backoff
                    delay = min(delay * 2, INSTALL_RETRY_MAX)
                    continue
            await self._endpoint_changed.wait()

    def _served_groups(self) -> list[tuple[str, tuple[str, ...]]]:
        """Kueue's visibility API and the extensions' groups: one APIService per version."""
        return [VISIBILITY_GROUP, *((group.name, group.versions) for extension in self.extensions for group in extension.api_groups)]

    def _local_queue_labels(self, lq: LocalQueueRef) -> dict[str, str] | None:
        obj = self.caches.local_queues.get(f"{lq.namespace}/{lq.name}")
        return dict(obj.metadata.labels or {}) if obj is not None else None

    def _elected(self) -> None:
        if self.opts.leader_elect:
            self.metrics.role = ROLE_LEADER
        self.admission.wake()

    async def run(self) -> int:
        opts = self.opts
        self.configuration = load_configuration(opts.config, opts.feature_gates)
        self.integrations = job_integrations(self.configuration)
        self.client = await _client(opts, self.component)
        self.caches = Caches.create(self.client, self.integrations)
        recorder = EventRecorder(self.client, component=f"kfed-{self.component.replace('_', '-')}")
        self.metrics = process_metrics(self.configuration, self._local_queue_labels)
        self.metrics.role = ROLE_FOLLOWER if opts.leader_elect else ROLE_STANDALONE
        self.admission = AdmissionController(
            self.client,
            self.caches,
            config=self.configuration,
            recorder=recorder,
            metrics=self.metrics,
            release_bare_evictions=self.release_unowned_evictions,
        )
        self.job_controllers = [
            JobController(
                self.client,
                self.caches,
                adapter,
                metrics=self.metrics,
                recorder=recorder,
                wait_for_pods_ready=self.configuration.pods_ready is not None,
            )
            for adapter in self.integrations.adapters
        ]
        self.recorder = recorder
        self.extensions = [factory(self) for factory in self.extension_factories]
        self._count_requests_and_events()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        code = 0
        try:
            self._serve("probe-server", make_probe_app(ready=self._ready, metrics=self.metrics), opts.health_address)
            if opts.metrics_address != opts.health_address:
                self._serve("metrics-server", make_probe_app(ready=self._ready, metrics=self.metrics), opts.metrics_address)
            if opts.webhooks:
                await self._start_webhooks()
            self.caches.start()
            for extension in self.extensions:
                self.groups.add(*(always(f"informer-{i.model.KIND}", i.run) for i in extension.informers))
            self.groups.add(always("events", recorder.run), *self.admission.runnables())
            self.groups.add(*(jobs.runnable() for jobs in self.job_controllers))
            for extension in self.extensions:
                self.groups.add(*extension.runnables())
            self.groups.on_elected(self._elected)
            self.groups.start()
            code = await self._lead()
        finally:
            await self._shutdown()
        if self.groups.failed is not None:
            name, err = self.groups.failed
            log.error("stopped because a runnable failed", extra={"runnable": name, "error": str(err) or type(err).__name__})
            return EXIT_RUNNABLE_FAILED
        return code

    async def _lead(self) -> int:
        opts = self.opts
        if not opts.leader_elect:
            await self._wait_synced()
            self.groups.elected()
            await self.stop.wait()
            return 0
        elector = LeaderElector(self.client, opts.leader_config())
        self.elector = elector
        if not await elector.acquire(self.stop):
            return 0
        await self._wait_synced()
        self.groups.elected()
        await elector.hold(self.stop)
        if self.stop.is_set():
            await self.groups.lost()
            await elector.release()
            return 0
        # Same as client-go's OnStoppedLeading in Kueue: stop at once, so that a process that
        # lost the lease never writes again; the Deployment restarts it as a standby.
        await self.groups.lost()
        self.metrics.role = ROLE_FOLLOWER
        return EXIT_LOST_LEADERSHIP

    async def _wait_synced(self) -> None:
        await self.caches.wait_synced()
        await asyncio.gather(*(i.synced.wait() for e in self.extensions for i in e.informers))

    def _count_requests_and_events(self) -> None:
        stats, recorder = self.client.stats, self.recorder
        self.metrics.counter_from(
            "kfed_kube_requests_total",
            "Requests sent to the apiserver, by verb.",
            ("verb",),
            lambda: [((verb,), count) for verb, count in stats.by_verb.items()],
        )
        # Events wait behind every other request (ratelimit.py); under a long overload their
        # queue fills and the newest are dropped, which an operator should be able to see.
        self.metrics.counter_from(
            "kfed_events_total",
            "Events this process sent, or dropped with its queue full.",
            ("outcome",),
            lambda: [(("sent",), recorder.sent), (("dropped",), recorder.dropped)],
        )

    async def _shutdown(self) -> None:
        """Stop within the budget: controllers first, then caches, servers and the client."""
        budget = self.opts.shutdown_timeout

        async def stop_all() -> None:
            for jobs in self.job_controllers:
                jobs.controller.stop()
            for extension in self.extensions:
                await extension.stop()
            await self.groups.stop()
            await self.caches.stop()
            for server in self.servers:
                server.socket.close()  # one whose runnable never started still holds its port
            await self.client.close()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop_all(), timeout=budget)
        log.info("stopped", extra={"component": self.component})


def main(
    argv: list[str] | None, *, component: str, extensions: Sequence[ExtensionFactory] = (), release_unowned_evictions: bool = False
) -> int:
    from manager.runtime.options import parse

    opts = parse(argv, component=component)
    logs.configure(opts.log_level)
    try:
        process = Process(opts, component=component, extensions=extensions, release_unowned_evictions=release_unowned_evictions)
        return asyncio.run(process.run())
    except KeyboardInterrupt:
        return 0
    except (OSError, ValueError) as err:
        log.error("cannot start", extra={"error": str(err)})
        return 2
