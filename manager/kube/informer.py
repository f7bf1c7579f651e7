"""List-then-watch caches: the controllers' view of one kind in one cluster.

A watch is not an endless stream: it ends when the server's timeout passes, it can die
silently (caught by the socket read timeout), and it can answer 410 Gone when etcd has
compacted the revision it resumes from. Each case is handled here: resume from the last
seen resourceVersion (advanced by bookmarks), relist on Gone, back off on errors.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any, Generic

from pydantic import ValidationError

from manager.kube.client import KubeClient, R, api_path
from manager.kube.errors import GoneError, KubeError, QuietWatchError

log = logging.getLogger("kfed.informer")

Handler = Callable[[str, Any, Any], None]
"""`handler(event_type, old, new)`: ADDED (old None), MODIFIED, DELETED (new None)."""


class Informer(Generic[R]):
    def __init__(
        self,
        client: KubeClient,
        model: type[R],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        indexes: dict[str, Callable[[R], Iterable[str]]] | None = None,
        watch_timeout: int = 300,
        read_timeout: float = 90.0,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.namespace = namespace
        self.label_selector = label_selector
        self.store: dict[str, R] = {}
        self.synced = asyncio.Event()
        self.handlers: list[Handler] = []
        self.relists = 0
        self.resource_version = ""
        self._watch_timeout = watch_timeout
        self._read_timeout = read_timeout
        self._rng = rng or random.Random()
        self._index_funcs = dict(indexes or {})
        self._indexes: dict[str, dict[str, set[str]]] = {name: {} for name in self._index_funcs}

    # --- reading ----------------------------------------------------------------------------------
    def get(self, key: str) -> R | None:
        return self.store.get(key)

    def items(self) -> list[R]:
        return list(self.store.values())

    def by_index(self, index: str, value: str) -> list[R]:
        keys = self._indexes[index].get(value, set())
        return [self.store[k] for k in sorted(keys) if k in self.store]

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    def remove_handler(self, handler: Handler) -> None:
        self.handlers.remove(handler)

    # --- the store --------------------------------------------------------------------------------
    def _index(self, key: str, old: R | None, new: R | None) -> None:
        for name, func in self._index_funcs.items():
            table = self._indexes[name]
            if old is not None:
                for value in func(old):
                    members = table.get(value)
                    if members is not None:
                        members.discard(key)
                        if not members:
                            del table[value]
            if new is not None:
                for value in func(new):
                    table.setdefault(value, set()).add(key)

    def _emit(self, kind: str, old: R | None, new: R | None) -> None:
        for handler in self.handlers:
            try:
                handler(kind, old, new)
            except Exception:  # a handler bug must not stop the cache
                log.exception("informer handler failed", extra={"kind": self.model.KIND})

    def _apply(self, kind: str, raw: dict[str, Any]) -> None:
        raw.setdefault("apiVersion", f"{self.model.GROUP}/{self.model.VERSION}" if self.model.GROUP else self.model.VERSION)
        raw.setdefault("kind", self.model.KIND)
        try:
            obj = self.model.model_validate(raw)
        except ValidationError as err:
            meta = raw.get("metadata") or {}
            log.warning(
                "ignoring an object that does not match the schema",
                extra={
                    "kind": self.model.KIND,
                    "key": f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/"),
                    "error": str(err.errors()[:1]),
                },
            )
            return
        key = obj.key
        old = self.store.get(key)
        if kind == "DELETED":
            if old is not None:
                del self.store[key]
                self._index(key, old, None)
            self._emit("DELETED", old if old is not None else obj, None)
            return
        self.store[key] = obj
        self._index(key, old, obj)
        self._emit("ADDED" if old is None else "MODIFIED", old, obj)

    def _replace(self, fresh: list[R]) -> None:
        """A relist: the store becomes the list, and the differences are emitted as events."""
        seen = set()
        for obj in fresh:
            key = obj.key
            seen.add(key)
            old = self.store.get(key)
            if old is not None and old.metadata.resource_version == obj.metadata.resource_version:
                continue
            self.store[key] = obj
            self._index(key, old, obj)
            self._emit("ADDED" if old is None else "MODIFIED", old, obj)
        for key in [k for k in self.store if k not in seen]:
            old = self.store.pop(key)
            self._index(key, old, None)
            self._emit("DELETED", old, None)

    # --- running ----------------------------------------------------------------------------------
    async def relist(self) -> None:
        listed = await self.client.list(self.model, namespace=self.namespace, label_selector=self.label_selector)
        self.relists += 1
        self._replace(listed.items)
        self.resource_version = listed.resource_version
        self.synced.set()

    async def run(self) -> None:
        """List, then watch forever. Cancel the task to stop."""
        backoff = 0.2
        need_list = True
        while True:
            try:
                if need_list:
                    await self.relist()
                    need_list = False
                await self._watch_once()
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except GoneError:
                log.info("watch expired; relisting", extra={"kind": self.model.KIND, "cluster": self.client.name})
                need_list = True
            except QuietWatchError:
                # Nothing changed and the bookmark was late: watch again from where we were,
                # at once and without a warning (a dead connection fails the next request).
                log.debug("watch quiet; watching again", extra={"kind": self.model.KIND, "cluster": self.client.name})
            except KubeError as err:
                log.warning("watch failed; retrying", extra={"kind": self.model.KIND, "cluster": self.client.name, "error": str(err)})
                await asyncio.sleep(backoff * (1 + self._rng.random()))  # backoff between attempts
                backoff = min(backoff * 2, 30.0)

    async def watch_until_error(self) -> None:
        """Watch from the last list (call `relist` first) until the connection fails: watches
        that end are resumed, a 410 relists, and any other error is raised to the caller,
        which owns the connection's health (MultiKueue's remote clusters do)."""
        while True:
            try:
                await self._watch_once()
            except GoneError:
                log.info("watch expired; relisting", extra={"kind": self.model.KIND, "cluster": self.client.name})
                await self.relist()
            except QuietWatchError:
                # Quiet is not lost: one small read (not retried) tells a live server from a
                # dead connection, and only its failure is raised to the connection's owner.
                await self.client.request("GET", api_path(self.model, namespace=self.namespace), query=self._probe_query())
                log.debug("watch quiet; watching again", extra={"kind": self.model.KIND, "cluster": self.client.name})

    def _probe_query(self) -> list[tuple[str, str]]:
        query = [("limit", "1")]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        return query

    async def _watch_once(self) -> None:
        # A random timeout spreads the re-watches of many caches over time, as client-go does.
        timeout = int(self._watch_timeout * (0.8 + 0.2 * self._rng.random()))
        events = self.client.watch(
            self.model,
            resource_version=self.resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            timeout_seconds=timeout,
            read_timeout=self._read_timeout,
        )
        async for event in events:
            rv = (event.object.get("metadata") or {}).get("resourceVersion")
            if event.type == "BOOKMARK":
                if rv:
                    self.resource_version = str(rv)
                continue
            self._apply(event.type, event.object)
            if rv:
                self.resource_version = str(rv)


class InformerSet(Generic[R]):
    """One kind in several namespaces, read as one cache: an Informer per namespace (`None`: one
    for the whole cluster). For an identity that may list and watch in some namespaces only
    (a worker registered with named namespaces)."""

    def __init__(
        self,
        client: KubeClient,
        model: type[R],
        *,
        namespaces: tuple[str, ...] | None = None,
        label_selector: str | None = None,
        indexes: dict[str, Callable[[R], Iterable[str]]] | None = None,
    ) -> None:
        self.namespaces = namespaces
        self.members: dict[str | None, Informer[R]] = {
            ns: Informer(client, model, namespace=ns, label_selector=label_selector, indexes=indexes)
            for ns in (namespaces if namespaces is not None else (None,))
        }

    @property
    def client(self) -> KubeClient:
        return next(iter(self.members.values())).client

    @client.setter
    def client(self, client: KubeClient) -> None:
        for member in self.members.values():
            member.client = client

    def get(self, key: str) -> R | None:
        member = self.members.get(None if self.namespaces is None else key.partition("/")[0])
        return member.get(key) if member is not None else None

    def items(self) -> list[R]:
        return [obj for member in self.members.values() for obj in member.items()]

    def by_index(self, index: str, value: str) -> list[R]:
        return [obj for member in self.members.values() for obj in member.by_index(index, value)]

    def add_handler(self, handler: Handler) -> None:
        for member in self.members.values():
            member.add_handler(handler)

    def remove_handler(self, handler: Handler) -> None:
        for member in self.members.values():
            member.remove_handler(handler)

    async def relist(self) -> None:
        await asyncio.gather(*(member.relist() for member in self.members.values()))

    async def watch_until_error(self) -> None:
        """Watch every namespace until one watch fails; its error is raised, the others stop."""
        watches = [asyncio.create_task(member.watch_until_error()) for member in self.members.values()]
        try:
            done, _ = await asyncio.wait(watches, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
