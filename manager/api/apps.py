"""Thin typed models of the apps/v1 kinds Kueue queues through their pods (the Deployment), as
kfed reads them. Like the core kinds (`manager.api.core`) they type only what kfed reads and
keep every other field."""

from __future__ import annotations

from pydantic import Field

from manager.api.core import PodTemplateSpec
from manager.api.meta import OpenModel, Resource

GROUP = "apps"
VERSION = "v1"


class DeploymentSpec(OpenModel):
    replicas: int | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class DeploymentStatus(OpenModel):
    replicas: int | None = None
    ready_replicas: int | None = None
    available_replicas: int | None = None


class Deployment(Resource, OpenModel, group=GROUP, version=VERSION, kind="Deployment", namespaced=True):
    spec: DeploymentSpec = Field(default_factory=DeploymentSpec)
    status: DeploymentStatus | None = None
