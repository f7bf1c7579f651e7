"""Load kubernetes_asyncio's connection code without its 800 generated models.

kfed builds its requests and reads its answers itself (`manager.kube.client`); from
kubernetes_asyncio it uses the ApiClient (the aiohttp session, TLS and credentials), its
Configuration and the kubeconfig and in-cluster loaders. But `import kubernetes_asyncio` runs
the package's `__init__`, which imports every API class and every model: about 32 MiB of
memory and 0.3 s of start-up in every manager, worker agent and `kfed` command, for classes
kfed never uses.

`load()` puts the packages `kubernetes_asyncio`, `kubernetes_asyncio.client` and
`kubernetes_asyncio.client.models` in `sys.modules` as deferred packages: their submodules
import as usual, and the first lookup of a name the package does not have yet (say
`kubernetes_asyncio.client.CoreV1Api`) runs the package's real `__init__` then, so code that
wants the whole client still gets it. If kubernetes_asyncio was already imported, or its
layout is not the one expected, it falls back to the plain import.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
import types
from pathlib import Path
from typing import Any

log = logging.getLogger("kfed.kube")

ROOT = "kubernetes_asyncio"
# The packages whose `__init__` imports every API and model, outermost first.
DEFERRED = (ROOT, f"{ROOT}.client", f"{ROOT}.client.models")
# What kfed uses, imported for real; each imports only what it needs.
CONNECTION_MODULES = (f"{ROOT}.client.exceptions", f"{ROOT}.client.configuration", f"{ROOT}.client.rest", f"{ROOT}.client.api_client")


class DeferredPackage(types.ModuleType):
    """A package whose `__init__` runs at the first lookup of a name it lacks."""

    def __init__(self, name: str, directory: Path) -> None:
        super().__init__(name)
        init = directory / "__init__.py"
        self.__file__ = str(init)
        self.__path__ = [str(directory)]
        self.__package__ = name
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(directory)])
        if spec is None or spec.loader is None:
            raise ImportError(f"no loader for {init}")
        self.__spec__ = spec
        self.__loader__ = spec.loader
        self.__cached__ = spec.cached
        self._kfed_state = "deferred"
        self._kfed_lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        # Only called for a name the module lacks (`__version__`, `CoreV1Api`, `__all__` for a
        # star import): the real `__init__` runs once, then the name is there or truly missing.
        # A lookup made while the `__init__` runs (in the same thread) is answered as the plain
        # package would answer it; another thread waits for the `__init__` to finish.
        lock = self.__dict__.get("_kfed_lock")
        if lock is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        with lock:
            if self.__dict__.get("_kfed_state") == "deferred":
                self._kfed_state = "loading"
                try:
                    self.__loader__.exec_module(self)  # type: ignore[union-attr]  # the package's own __init__
                except BaseException:
                    self._kfed_state = "deferred"  # the next lookup tries again, and raises the cause
                    raise
                self._kfed_state = "loaded"
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


def load() -> None:
    """Make `from kubernetes_asyncio import client, config` cheap (see the module's docstring)."""
    if ROOT in sys.modules:
        return  # imported already, whole or lean: nothing to save
    spec = importlib.util.find_spec(ROOT)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    root = Path(locations[0]) if locations else None
    directories = {name: root.joinpath(*name.split(".")[1:]) for name in DEFERRED} if root is not None else {}
    if not directories or not all((d / "__init__.py").is_file() for d in directories.values()):
        importlib.import_module(ROOT)
        return
    for name, directory in directories.items():
        package = DeferredPackage(name, directory)
        sys.modules[name] = package
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, package)
    try:
        for module in CONNECTION_MODULES:
            importlib.import_module(module)
        client = sys.modules[f"{ROOT}.client"]
        # What the config loaders import from the client package.
        client.Configuration = sys.modules[f"{ROOT}.client.configuration"].Configuration  # type: ignore[attr-defined]
        client.ApiClient = sys.modules[f"{ROOT}.client.api_client"].ApiClient  # type: ignore[attr-defined]
        client.ApiException = sys.modules[f"{ROOT}.client.exceptions"].ApiException  # type: ignore[attr-defined]
        importlib.import_module(f"{ROOT}.config")
    except Exception:  # a layout this does not know: the plain import, which always works
        log.debug("lean import of kubernetes_asyncio failed; importing it whole", exc_info=True)
        for name in [m for m in sys.modules if m == ROOT or m.startswith(f"{ROOT}.")]:
            del sys.modules[name]
        importlib.import_module(ROOT)
