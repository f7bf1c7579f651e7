"""Reading manifests: YAML text to typed objects, with every error located.

Pure: callers read the files. Each error names the file, the document's index in it, the
kind and name, and the field path, for example
`team-a.yaml[2] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[1].resources[0].nominalQuota: invalid quantity "9x"`.
Every error in the input is reported, not only the first.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from manager.api import config, conversion, core, kueue, v1beta1
from manager.api import constants as c
from manager.api.meta import OpenModel, Resource
from manager.api.validation import FieldError, label_value_errors, not_supported, object_errors, required

HUB_API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_VERSIONS: dict[str, dict[str, type[Resource]]] = {
    "kueue.x-k8s.io/v1beta2": kueue.KIND_BY_NAME,
    "kueue.x-k8s.io/v1beta1": v1beta1.KIND_BY_NAME,
}
CORE_KINDS: dict[tuple[str, str], type[BaseModel]] = {
    ("batch/v1", "Job"): core.Job,
    ("v1", "Namespace"): core.Namespace,
    ("v1", "Secret"): core.Secret,
    ("v1", "LimitRange"): core.LimitRange,
    ("scheduling.k8s.io/v1", "PriorityClass"): core.PriorityClass,
    ("config.kueue.x-k8s.io/v1beta2", "Configuration"): config.Configuration,
}


@dataclass(frozen=True)
class Document:
    """One YAML document and where it came from."""

    source: str
    index: int
    data: Any

    @property
    def kind(self) -> str:
        return str(self.data.get("kind", "")) if isinstance(self.data, dict) else ""

    @property
    def display_name(self) -> str:
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        if not isinstance(meta, dict):
            return ""
        name = str(meta.get("name") or meta.get("generateName") or "")
        return f"{meta['namespace']}/{name}" if meta.get("namespace") else name


@dataclass(frozen=True)
class ManifestError:
    """A FieldError located in the input."""

    document: Document
    error: FieldError

    def __str__(self) -> str:
        where = f"{self.document.source}[{self.document.index}]"
        if self.document.kind or self.document.display_name:
            where += f" {self.document.kind or '?'}/{self.document.display_name or '?'}"
        return f"{where}: {self.error}"


@dataclass
class Loaded:
    """What a set of documents yields: typed objects (v1beta2 for Kueue kinds), errors, skipped kinds."""

    objects: list[tuple[Document, BaseModel]] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)
    skipped: list[Document] = field(default_factory=list)

    def extend(self, other: Loaded) -> None:
        self.objects += other.objects
        self.errors += other.errors
        self.skipped += other.skipped


# Limits of the YAML reader. Every reader of a user's YAML goes through `split_documents`, so
# no input can make kfed (or its webhooks) hang, exhaust memory or overflow the stack.
MAX_YAML_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 128  # a Job's pod template nests about 15 levels; CRD schemas about 40
MAX_ALIASES = 1000
# Aliases may make the documents at most twice as large as written, plus this many nodes.
ALIAS_EXPANSION_ALLOWANCE = 100_000
# libyaml's C parser when PyYAML was built with it (about 15 times faster), else PyYAML's own.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_HAS_LIBYAML = _LOADER is not yaml.SafeLoader


class YamlRefusedError(ValueError):
    """Input the reader refuses before building it (too large, too deep, alias bombs)."""

    def __init__(self, message: str, line: int | None = None, document: int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.document = document  # the document's index, when found before reading the stream


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _line(node: yaml.Node) -> int | None:
    mark = getattr(node, "start_mark", None)
    return mark.line + 1 if mark is not None else None


def _measure_aliased(root: yaml.Node, written: int) -> None:
    """Height and expanded size of a document that uses aliases (each node once, memoized)."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    limit = 2 * written + ALIAS_EXPANSION_ALLOWANCE
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            children = _children(node)
            size[key] = 1 + sum(size[id(child)] for child in children)
            height[key] = 1 + max((height[id(child)] for child in children), default=0)
            if size[key] > limit:
                raise YamlRefusedError(f"aliases expand the document beyond {limit} nodes", _line(node))
            if height[key] > MAX_DEPTH:
                raise YamlRefusedError(f"nested deeper than {MAX_DEPTH} levels", _line(node))
            continue
        if key in size:
            continue
        if key in entered:
            raise YamlRefusedError("an alias refers to a node that contains it", _line(node))
        entered.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))


def _check_node(root: yaml.Node) -> None:
    """Refuse a composed document that is too deep or whose aliases expand too much."""
    seen: set[int] = set()
    aliases = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise YamlRefusedError(f"nested deeper than {MAX_DEPTH} levels", _line(node))
        if id(node) in seen:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise YamlRefusedError(f"more than {MAX_ALIASES} aliases")
            continue
        seen.add(id(node))
        stack.extend((child, depth + 1) for child in _children(node))
    if aliases:
        _measure_aliased(root, len(seen))


def _check_flow_depth(text: str) -> None:
    """libyaml slows down on deep flow nesting (`[[[[...`, 20,000 levels take seconds): refuse it
    before composing. Brackets are counted first (cheap); only text with enough of them is
    parsed to events to find the real depth, which ignores brackets inside strings."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = deepest = 0
    for char in re.findall(r"[\[\]{}]", text):
        depth = depth + 1 if char in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    if deepest <= MAX_DEPTH:
        return
    depth = 0
    document = -1
    events = yaml.parse(text, Loader=_LOADER)
    while True:
        try:
            event = next(events)
        except StopIteration:
            return
        except yaml.MarkedYAMLError as err:
            # libyaml 0.2.6 (PyYAML 6.0.4) scans ahead and stops at its own flow limit (1,000
            # levels) before handing out the events that reach ours.
            if "nesting depth" not in str(err.problem):
                raise
            line = err.problem_mark.line + 1 if err.problem_mark is not None else None
            raise YamlRefusedError(f"nested deeper than {MAX_DEPTH} levels", line, max(document, 0)) from None
        if isinstance(event, yaml.DocumentStartEvent):
            document += 1
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else None
                raise YamlRefusedError(f"nested deeper than {MAX_DEPTH} levels", line, max(document, 0))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def decode(raw: str | bytes) -> str:
    """Text of the input; bytes that are not UTF-8 raise YamlRefusedError naming the offset."""
    if len(raw) > MAX_YAML_BYTES:
        raise YamlRefusedError(f"larger than {MAX_YAML_BYTES // (1024 * 1024)} MiB")
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise YamlRefusedError(f"not UTF-8: byte 0x{raw[err.start]:02x} at offset {err.start}") from None


_STR_TAG = "tag:yaml.org,2002:str"
# Tags whose values are immutable: one constructed value serves every equal scalar.
_CACHED_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp", "binary"))


def _fast_path_applies(text: str) -> bool:
    """Plain data: no anchors or aliases, no tags, no merge keys. Nearly every manifest."""
    return not any(marker in text for marker in ("&", "*", "!", "<<"))


def _build_from_events(text: str) -> typing.Iterator[Any]:
    """Documents built straight from libyaml's events, for plain data (`_fast_path_applies`).

    PyYAML's composer makes a node and two marks per scalar through Python constructors; this
    skips the nodes and resolves each distinct plain scalar once, with PyYAML's own resolver
    and constructors, so the result is the same as `yaml.safe_load_all`. About four times
    faster on a large input."""
    loader = _LOADER(text)
    resolved: dict[tuple[str, bool], Any] = {}
    scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
    mapping_start, sequence_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    try:
        root: Any = None
        # Each open collection: [container, is_mapping, key, has_key]
        stack: list[list[Any]] = []
        frame: list[Any] | None = None
        while True:
            event = loader.get_event()
            kind = type(event)
            if kind is scalar_event:
                if not event.implicit[0]:
                    value: Any = event.value  # quoted: a string
                else:
                    key = (event.value, event.implicit[1])
                    if key in resolved:
                        value = resolved[key]
                    else:
                        tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
                        if tag == _STR_TAG:
                            value = event.value
                        else:
                            node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
                            value = loader.construct_object(node, deep=True)
                        if tag == _STR_TAG or tag in _CACHED_TAGS:
                            resolved[key] = value
            elif kind is mapping_start or kind is sequence_start:
                if len(stack) >= MAX_DEPTH:
                    raise YamlRefusedError(f"nested deeper than {MAX_DEPTH} levels", event.start_mark.line + 1)
                value = {} if kind is mapping_start else []
            elif kind in ends:
                stack.pop()
                frame = stack[-1] if stack else None
                continue
            elif kind is yaml.DocumentStartEvent:
                root = None
                continue
            elif kind is yaml.DocumentEndEvent:
                yield root
                continue
            elif kind is alias_event:  # not reached: `_fast_path_applies` saw no "*"
                raise yaml.composer.ComposerError(None, None, f"found undefined alias {event.anchor!r}", event.start_mark)
            elif kind is yaml.StreamEndEvent:
                return
            else:
                continue  # StreamStartEvent
            # Put the value in its place: the root, a list, or a mapping's key or value.
            if frame is None:
                root = value
            elif not frame[1]:
                frame[0].append(value)
            elif frame[3]:
                frame[0][frame[2]] = value
                frame[3] = False
            elif isinstance(value, (dict, list)):
                raise yaml.constructor.ConstructorError("while constructing a mapping", None, "found unhashable key", event.start_mark)
            else:
                frame[2] = value
                frame[3] = True
            if kind is mapping_start or kind is sequence_start:
                frame = [value, kind is mapping_start, None, False]
                stack.append(frame)
    finally:
        loader.dispose()


def iter_yaml(raw: str | bytes) -> typing.Iterator[Any]:
    """Each YAML document's data (None for an empty one), within the reader's limits. Raises
    YamlRefusedError or yaml.YAMLError."""
    text = decode(raw)
    _check_flow_depth(text)
    if _HAS_LIBYAML and _fast_path_applies(text):
        yield from _build_from_events(text)
        return
    loader = _LOADER(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            _check_node(node)
            yield loader.construct_document(node)
    except RecursionError:
        # PyYAML's own composer (without libyaml) recurses once per level.
        raise YamlRefusedError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def split_documents(text: str | bytes, source: str) -> tuple[list[Document], list[ManifestError]]:
    """Split YAML text into documents; an error is reported with its line and ends the file."""
    documents: list[Document] = []
    errors: list[ManifestError] = []
    index = 0
    try:
        for data in iter_yaml(text):
            if data is not None:
                documents.append(Document(source, index, data))
            index += 1
    except YamlRefusedError as err:
        line = f"line {err.line}: " if err.line is not None else ""
        at = err.document if err.document is not None else index
        errors.append(ManifestError(Document(source, at, None), FieldError("", f"refused: {line}{err}")))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        errors.append(ManifestError(Document(source, index, None), FieldError("", f"invalid YAML: {line}{problem}")))
    return documents, errors


def shape_errors(data: Any) -> list[FieldError]:
    """Why a document is not one object: a list, a scalar, or a `List` of objects."""
    if isinstance(data, list):
        return [FieldError("", "a manifest must be one object (a mapping with apiVersion and kind), not a list")]
    if not isinstance(data, dict):
        return [FieldError("", "a manifest must be a mapping with apiVersion and kind")]
    if str(data.get("kind", "")).endswith("List") and "items" in data:
        return [FieldError("kind", f"a {data['kind']} is not read: write each of its items as a YAML document of its own")]
    return []


def object_documents(text: str | bytes, source: str) -> tuple[list[Document], list[ManifestError]]:
    """The documents of the input that are single objects, and errors for the others."""
    documents, errors = split_documents(text, source)
    objects = []
    for document in documents:
        problems = shape_errors(document.data)
        errors += [ManifestError(document, problem) for problem in problems]
        if not problems:
            objects.append(document)
    return objects, errors


def queue_label_errors(data: dict[str, Any]) -> list[FieldError]:
    """The queue-name label must be a valid label value (the name of a LocalQueue)."""
    meta = data.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(labels, dict) or c.QUEUE_NAME_LABEL not in labels:
        return []
    value = labels[c.QUEUE_NAME_LABEL]
    path = f"metadata.labels[{c.QUEUE_NAME_LABEL}]"
    if not isinstance(value, str):
        return [FieldError(path, f"Invalid value: {value!r}: must be a string")]
    return label_value_errors(path, value)


def _path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif "[" in item or "(" in item:
            continue  # pydantic's name for a union member, not a field
        else:
            parts.append(f".{item}" if parts else item)
    return "".join(parts)


def pydantic_field_errors(err: ValidationError) -> list[FieldError]:
    """A pydantic error as one FieldError per field path (`spec.resourceGroups[0]...`)."""
    result: list[FieldError] = []
    seen: set[str] = set()
    for detail in err.errors(include_url=False):
        path = _path(detail["loc"])
        kind = detail["type"]
        given = detail.get("input")
        if kind == "missing":
            error = required(path)
        elif kind == "literal_error":
            expected = (detail.get("ctx") or {}).get("expected", "")
            options = [part.strip().strip("'") for part in expected.replace(" or ", ",").split(",") if part.strip()]
            error = not_supported(path, given, options)
        elif kind == "value_error":
            error = FieldError(path, detail["msg"].removeprefix("Value error, "))
        elif kind == "too_long":
            ctx = detail.get("ctx") or {}
            error = FieldError(path, f"Too many: {ctx.get('actual_length')}: must have at most {ctx.get('max_length')} items")
        elif kind == "too_short":
            ctx = detail.get("ctx") or {}
            error = FieldError(path, f"Required value: must have at least {ctx.get('min_length')} item(s)")
        elif kind == "string_pattern_mismatch":
            error = FieldError(path, f'Invalid value: "{given}": must match the pattern {detail["ctx"]["pattern"]}')
        else:
            error = FieldError(path, f"Invalid value: {given!r}: {detail['msg'][:1].lower()}{detail['msg'][1:]}")
        # A union of X | None reports the same problem once per member; keep one.
        if str(error) not in seen:
            seen.add(str(error))
            result.append(error)
    return result


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `list[X] | None`, if there is one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is dict:
        return None
    if origin in (list, typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


@functools.cache
def _fields_of(model: type[BaseModel]) -> dict[str, type[BaseModel] | None]:
    """Each field's wire name and the model inside it (computed once per model)."""
    return {(info.alias or name): _model_in(info.annotation) for name, info in model.model_fields.items()}


def unknown_field_errors(model: type[BaseModel], data: Any, path: str = "") -> list[FieldError]:
    """Fields the model does not declare, as the API server's strict field validation reports them."""
    if issubclass(model, OpenModel) or not isinstance(data, dict):
        return []
    known = _fields_of(model)
    errors: list[FieldError] = []
    for key, value in data.items():
        if key not in known:
            errors.append(FieldError(f"{path}.{key}" if path else str(key), "unknown field"))
            continue
        nested = known[key]
        if nested is None or key == "metadata":
            continue
        child = f"{path}.{key}" if path else str(key)
        if isinstance(value, list):
            for i, item in enumerate(value):
                errors += unknown_field_errors(nested, item, f"{child}[{i}]")
        else:
            errors += unknown_field_errors(nested, value, child)
    return errors


def model_for(data: dict[str, Any]) -> type[BaseModel] | None:
    api_version, kind = str(data.get("apiVersion", "")), str(data.get("kind", ""))
    if api_version in KUEUE_VERSIONS:
        return KUEUE_VERSIONS[api_version].get(kind)
    return CORE_KINDS.get((api_version, kind))


def load_document(document: Document) -> Loaded:
    """Validate one document with its own version's schema and Kueue's rules."""
    result = Loaded()

    def fail(errors: list[FieldError]) -> Loaded:
        result.errors += [ManifestError(document, error) for error in errors]
        return result

    data = document.data
    shape = shape_errors(data)
    if shape:
        return fail(shape)
    missing = [required(key) for key in ("apiVersion", "kind") if not data.get(key)]
    if missing:
        return fail(missing)
    model = model_for(data)
    if model is None:
        if str(data["apiVersion"]).startswith("kueue.x-k8s.io/"):
            return fail([FieldError("kind", f'no kind "{data["kind"]}" is registered for version "{data["apiVersion"]}"')])
        result.skipped.append(document)
        return result
    errors = queue_label_errors(data) + unknown_field_errors(model, data)
    obj: BaseModel | None = None
    try:
        obj = model.model_validate(data)
    except ValidationError as err:
        errors += pydantic_field_errors(err)
    if errors or obj is None:
        return fail(errors)
    if data["apiVersion"] in KUEUE_VERSIONS and data["apiVersion"] != HUB_API_VERSION:
        hub_data = conversion.convert(data, "v1beta2")
        hub_model = model_for(hub_data)
        assert hub_model is not None
        obj = hub_model.model_validate(hub_data)
    if isinstance(obj, Resource):
        semantic = object_errors(obj)
        if semantic:
            return fail(semantic)
    result.objects.append((document, obj))
    return result


def load_text(text: str | bytes, source: str) -> Loaded:
    documents, errors = split_documents(text, source)
    result = Loaded(errors=errors)
    for document in documents:
        result.extend(load_document(document))
    return result


def validate_object(data: dict[str, Any]) -> tuple[BaseModel | None, list[FieldError]]:
    """An object as an apiserver sends it (any served version): the v1beta2 model, or every
    error with its field path. Unknown fields are not reported: the apiserver prunes them."""
    model = model_for(data)
    label_errors = queue_label_errors(data)
    if label_errors:
        return None, label_errors
    if model is None:
        return None, [FieldError("kind", f'no kind "{data.get("kind")}" is registered for version "{data.get("apiVersion")}"')]
    try:
        model.model_validate(data)
    except ValidationError as err:
        return None, pydantic_field_errors(err)
    hub_data = conversion.convert(data, "v1beta2") if data.get("apiVersion") in KUEUE_VERSIONS else data
    hub_model = model_for(hub_data)
    assert hub_model is not None
    obj = hub_model.model_validate(hub_data)
    errors = object_errors(obj) if isinstance(obj, Resource) else []
    return (None, errors) if errors else (obj, [])
