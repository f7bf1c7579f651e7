"""Building one kubernetes_asyncio ApiClient per cluster, never from the global configuration."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes_asyncio import client, config


async def api_client_from_kubeconfig(kubeconfig: dict[str, Any], *, context: str | None = None) -> client.ApiClient:
    """An ApiClient for one cluster. The caller closes it (`await api.close()`)."""
    configuration = client.Configuration()
    await config.load_kube_config_from_dict(config_dict=copy.deepcopy(kubeconfig), context=context, client_configuration=configuration)
    return client.ApiClient(configuration=configuration)
