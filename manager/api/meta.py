"""Shared building blocks: the base model, ObjectMeta, conditions, selectors, taints."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


@lru_cache(maxsize=4096)
def format_time(value: datetime) -> str:
    """metav1.Time as Kubernetes writes it: RFC 3339 in UTC with a "Z" and whole seconds.
    Remembered: every status written is dumped whole, so a busy manager formats the same few
    condition times again and again (strftime was 1.7 % of its CPU)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Time = Annotated[datetime, PlainSerializer(format_time, return_type=str, when_used="json")]
"""metav1.Time: parsed into an aware datetime, written back as RFC 3339 UTC."""

Name = Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
LabelName = Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)]


# --- what the CRDs declare beyond the shape (read by `manager.api.crdgen`) ---------------------
# Field(json_schema_extra=...) values. The list and map markers decide how Server-Side Apply
# merges a field: a `map` list keyed by `type` lets each field manager own its own conditions.
CRD_DEFAULT = "x-kfed-crd-default"
LIST_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}
LIST_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}
MAP_ATOMIC: dict[str, Any] = {"x-kubernetes-map-type": "atomic"}


def list_map(*keys: str) -> dict[str, Any]:
    """A list merged item by item, each item named by `keys` (which must be required or defaulted)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def crd_default(value: Any) -> dict[str, Any]:
    """A default the API server applies, as Kueue's CRD does. The model keeps None, so what a
    user wrote is what kfed writes back; `effective_*` properties read the default."""
    return {CRD_DEFAULT: value}


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """CEL rules (rule, message) the API server enforces where OpenAPI cannot say it."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


def cel_config(rule: str, message: str) -> ConfigDict:
    """The model_config of a model the API server checks with one CEL rule."""
    return ConfigDict(json_schema_extra=cel((rule, message)))


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


# metav1.Condition's message limit; every writer truncates to it.
MAX_CONDITION_MESSAGE = 32768


def utcnow() -> datetime:
    """The one wall clock of kfed's writers (timezone-aware UTC, as the API stores times);
    controllers take a `clock` argument defaulting to it, so tests inject their own."""
    return datetime.now(UTC)


class Condition(KubeModel):
    """metav1.Condition."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=MAX_CONDITION_MESSAGE)
    last_transition_time: Time | None = None
    observed_generation: int | None = Field(default=None, ge=0)


Conditions = Annotated[list[Condition], Field(max_length=16, json_schema_extra=list_map("type"))]
"""`status.conditions` of every Kueue kind: one entry per type, each owned by its writer."""


class LabelSelectorRequirement(KubeModel):
    key: str
    # Any string, as in the Kubernetes schema; `manager.api.validation` names the bad ones.
    operator: str
    values: list[str] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)


class LabelSelector(KubeModel):
    model_config = ConfigDict(json_schema_extra=MAP_ATOMIC)

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)


class Taint(KubeModel):
    key: str
    value: str | None = None
    effect: str
    time_added: Time | None = None


class Toleration(KubeModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


TAINT_RULES = cel((f"self.all(x, x.effect in {_cel_list(TAINT_EFFECTS)})", f"supported taint effect values: {_cel_list(TAINT_EFFECTS)}"))
TOLERATION_RULES = cel(
    ("self.all(x, !has(x.key) ? x.operator == 'Exists' : true)", "operator must be Exists when 'key' is empty"),
    (
        "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)",
        "effect must be 'NoExecute' when 'tolerationSeconds' is set",
    ),
    ("self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])", "supported toleration values: 'Equal'(default), 'Exists'"),
    ("self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)", "a value must be empty when 'operator' is 'Exists'"),
    (
        f"self.all(x, !has(x.effect) || x.effect in {_cel_list(TAINT_EFFECTS)})",
        f"supported taint effect values: {_cel_list(TAINT_EFFECTS)}",
    ),
)
"""The rules on a list of tolerations (Kubernetes' own, which a CRD has to spell out)."""


def plural_of(kind: str) -> str:
    """The resource name Kubernetes derives from a kind (as kubebuilder does): lowercased, plus
    "es" after s, x, z, ch or sh, "ies" in place of a final y after a consonant, else "s"."""
    name = kind.lower()
    if name.endswith(("s", "x", "z", "ch", "sh")):
        return name + "es"
    if name.endswith("y") and name[-2:-1] not in ("a", "e", "i", "o", "u"):
        return name[:-1] + "ies"
    return name + "s"


class Resource(KubeModel):
    """A top-level Kubernetes object. Subclasses name the kind by keywords of their class line,
    which set these class variables (PLURAL, when not set, is `plural_of(KIND)`)."""

    GROUP: ClassVar[str] = ""
    VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = ""
    PLURAL: ClassVar[str] = ""
    NAMESPACED: ClassVar[bool] = False

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def __init_subclass__(
        cls,
        *,
        group: str | None = None,
        version: str | None = None,
        kind: str | None = None,
        plural: str | None = None,
        namespaced: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """A kind names itself in its class line: `class Job(Resource, group="batch", kind="Job", namespaced=True)`."""
        super().__init_subclass__(**kwargs)
        names = {"GROUP": group, "VERSION": version, "KIND": kind, "PLURAL": plural, "NAMESPACED": namespaced}
        for name, value in names.items():
            if value is not None:
                setattr(cls, name, value)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.KIND and not cls.PLURAL:
            cls.PLURAL = plural_of(cls.KIND)

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


_RESOURCE_VERSION = re.compile(r"[1-9][0-9]*")
Copy = TypeVar("Copy", bound=Resource)


def newest_copy(*copies: Copy | None) -> Copy | None:
    """The newest of several copies of one object (by `older_resource_version`); None if none."""
    best: Copy | None = None
    for copy in copies:
        if copy is not None and (best is None or older_resource_version(best.metadata.resource_version, copy.metadata.resource_version)):
            best = copy
    return best


def older_resource_version(candidate: str | None, held: str | None) -> bool:
    """Whether `candidate` is an older version of an object than `held` (two copies of one
    object). Resource versions compare as integers when both are well formed (KEP-5504,
    apimachinery's CompareResourceVersion: a positive integer without leading zeros); anything
    else is not known to be older."""
    if not candidate or not held or not _RESOURCE_VERSION.fullmatch(candidate) or not _RESOURCE_VERSION.fullmatch(held):
        return False
    return int(candidate) < int(held)


def find_condition(conditions: list[Condition] | None, condition_type: str) -> Condition | None:
    for condition in conditions or []:
        if condition.type == condition_type:
            return condition
    return None


def is_condition_true(conditions: list[Condition] | None, condition_type: str) -> bool:
    condition = find_condition(conditions, condition_type)
    return condition is not None and condition.status == "True"


class ConditionState(Protocol):
    """What the transition rule reads of a condition: a metav1.Condition or the engine's own."""

    @property
    def status(self) -> str: ...

    @property
    def last_transition_time(self) -> datetime | None: ...


def transition_time(previous: ConditionState | None, status: str, now: datetime) -> datetime:
    """Kubernetes' rule for a condition's lastTransitionTime: it changes only when the status does."""
    if previous is not None and previous.status == status and previous.last_transition_time is not None:
        return previous.last_transition_time
    return now


def same_condition(old: Condition | None, new: Condition) -> bool:
    """Whether writing `new` would change nothing a reader sees (the time aside)."""
    return old is not None and (old.status, old.reason, old.message, old.observed_generation) == (
        new.status,
        new.reason,
        new.message,
        new.observed_generation,
    )


def set_condition(conditions: list[Condition] | None, new: Condition, *, now: datetime) -> list[Condition]:
    """Kubernetes' SetStatusCondition, the one condition upsert of kfed's writers: `new` takes
    the place of the condition of its type, its message cut to the limit, and its
    lastTransitionTime kept from the old one while the status stays the same."""
    previous = find_condition(conditions, new.type)
    when = transition_time(previous, new.status, now)
    new = new.model_copy(update={"message": new.message[:MAX_CONDITION_MESSAGE], "last_transition_time": when})
    return [cond for cond in conditions or [] if cond.type != new.type] + [new]
