"""Shared building blocks: the base model, ObjectMeta, conditions, selectors, taints."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _format_time(value: datetime) -> str:
    # Kubernetes writes metav1.Time as RFC 3339 in UTC with a "Z" and whole seconds.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Time = Annotated[datetime, PlainSerializer(_format_time, return_type=str, when_used="json")]
"""metav1.Time: parsed into an aware datetime, written back as RFC 3339 UTC."""

Name = Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
LabelName = Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)]


class KubeModel(BaseModel):
    """Base of every model: camelCase on the wire, snake_case in Python, unknown fields ignored.

    Optional fields default to None and are left out when written, so what a user wrote is
    what is written back (an explicit `{}` stays `{}`).
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", validate_assignment=False)

    def to_dict(self) -> dict[str, Any]:
        """The object as the API server would store it (camelCase, no None values)."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, mode="json")


class OpenModel(KubeModel):
    """A model that keeps fields it does not declare, for core kinds kfed only partly types."""

    model_config = ConfigDict(extra="allow")


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None


class Condition(KubeModel):
    """metav1.Condition."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: Time | None = None
    observed_generation: int | None = Field(default=None, ge=0)


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(KubeModel):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class Taint(KubeModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    time_added: Time | None = None


class Toleration(KubeModel):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Resource(KubeModel):
    """A top-level Kubernetes object. Subclasses set the class variables that name the kind."""

    GROUP: ClassVar[str] = ""
    VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = ""
    PLURAL: ClassVar[str] = ""
    NAMESPACED: ClassVar[bool] = False

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def model_post_init(self, context: Any) -> None:
        if not self.api_version:
            self.api_version = f"{self.GROUP}/{self.VERSION}" if self.GROUP else self.VERSION
        if not self.kind:
            self.kind = self.KIND

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""

    @property
    def key(self) -> str:
        """`namespace/name` for namespaced objects, `name` otherwise."""
        return f"{self.namespace}/{self.name}" if self.NAMESPACED else self.name


def find_condition(conditions: list[Condition] | None, condition_type: str) -> Condition | None:
    for condition in conditions or []:
        if condition.type == condition_type:
            return condition
    return None


def is_condition_true(conditions: list[Condition] | None, condition_type: str) -> bool:
    condition = find_condition(conditions, condition_type)
    return condition is not None and condition.status == "True"
