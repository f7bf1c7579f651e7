"""An apiserver's audit log, for checking what one identity really did (pure).

`audit_policy` is the policy a harness apiserver runs with to log, at Metadata level, every
request of the named users and nothing else. `read_audit_log` parses the log the apiserver
writes with `--audit-log-format=json` (one event a line), and `requests_of` and `denied_to`
turn it into the requests RBAC decided, for `manager.api.rbac` to compare with a role.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from manager.api.rbac import Request

AUDIT_API_VERSION = "audit.k8s.io/v1"


def audit_policy(users: Sequence[str]) -> dict[str, Any]:
    """Metadata (who, what, the answer's code; no bodies) for `users`' requests, nothing for
    anyone else's. RequestReceived is left out: the later stages carry the same request with its
    answer, and a watch still open when the log is read has its ResponseStarted."""
    return {
        "apiVersion": AUDIT_API_VERSION,
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": list(users)}, {"level": "None"}],
    }


@dataclass(frozen=True)
class AuditEntry:
    """One audit event: the request, who made it, and the answer's code (None before it)."""

    request: Request
    user: str
    groups: tuple[str, ...]
    code: int | None
    audit_id: str


class AuditLogError(ValueError):
    """A line of the log that is not an audit event; the message names the line."""


def read_audit_log(lines: Iterable[str], *, where: str = "audit log") -> list[AuditEntry]:
    entries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as err:
            raise AuditLogError(f"{where}:{number}: not JSON ({err.msg})") from None
        if not isinstance(event, dict) or event.get("kind") != "Event":
            raise AuditLogError(f"{where}:{number}: not an audit Event")
        entries.append(_entry(event))
    return entries


def _entry(event: dict[str, Any]) -> AuditEntry:
    user = event.get("user") or {}
    ref = event.get("objectRef")
    verb = str(event.get("verb", ""))
    if ref and ref.get("resource"):
        request = Request(
            verb=verb,
            group=str(ref.get("apiGroup") or ""),
            resource=str(ref["resource"]),
            subresource=str(ref.get("subresource") or ""),
            namespace=str(ref.get("namespace") or ""),
            name=str(ref.get("name") or ""),
        )
    else:
        request = Request(verb=verb, path=urllib.parse.urlsplit(str(event.get("requestURI", ""))).path)
    status = event.get("responseStatus") or {}
    code = status.get("code")
    return AuditEntry(
        request=request,
        user=str(user.get("username", "")),
        groups=tuple(str(group) for group in user.get("groups") or ()),
        code=int(code) if code is not None else None,
        audit_id=str(event.get("auditID", "")),
    )


def requests_of(entries: Iterable[AuditEntry], user: str) -> set[Request]:
    """Every distinct request `user` made."""
    return {entry.request for entry in entries if entry.user == user}


def groups_of(entries: Iterable[AuditEntry], user: str) -> tuple[str, ...]:
    """The groups the apiserver authenticated `user` into (RBAC binds groups too)."""
    return next((entry.groups for entry in entries if entry.user == user), ())


def denied_to(entries: Iterable[AuditEntry], user: str) -> list[Request]:
    """The requests of `user` that RBAC refused (403), each once, in order."""
    return sorted({entry.request for entry in entries if entry.user == user and entry.code == 403})
