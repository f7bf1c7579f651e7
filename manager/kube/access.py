"""Asking an apiserver what the caller may do (a SelfSubjectAccessReview): every authenticated
identity may ask, so the answer never costs a refused request."""

from __future__ import annotations

from manager.kube.client import KubeClient


async def can_i(client: KubeClient, *, group: str, resource: str, verb: str, namespace: str = "", subresource: str = "") -> bool:
    """Whether the client's identity may `verb` the resource (in `namespace`, or cluster-wide)."""
    attributes = {"group": group, "resource": resource, "subresource": subresource, "verb": verb, "namespace": namespace}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attributes}}
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    answer = await client.request("POST", path, body=review, what="SelfSubjectAccessReview")
    return bool((answer.get("status") or {}).get("allowed"))
