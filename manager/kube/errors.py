"""Typed errors for every apiserver answer a controller must tell apart.

Controllers catch these, never kubernetes_asyncio's ApiException or aiohttp's errors: the
gateway maps HTTP status codes and transport failures here, with the Status message kept.
"""

from __future__ import annotations

import json
from typing import Any


class KubeError(Exception):
    """An apiserver call failed. `status` is the HTTP code (0 for transport failures)."""

    retryable = False

    def __init__(self, message: str, *, status: int = 0, reason: str = "", details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.details = details or {}


class NotFoundError(KubeError):
    pass


class ConflictError(KubeError):
    """The write lost a race (resourceVersion precondition or a concurrent update)."""


class AlreadyExistsError(ConflictError):
    pass


class GoneError(KubeError):
    """410: the resourceVersion is too old (etcd compacted it); relist."""


class UnauthorizedError(KubeError):
    pass


class ForbiddenError(KubeError):
    pass


class InvalidError(KubeError):
    """422 (or 400): the object was rejected by validation or a webhook; `causes` name the fields."""

    @property
    def causes(self) -> list[dict[str, Any]]:
        causes = self.details.get("causes")
        return list(causes) if isinstance(causes, list) else []


class TooManyRequestsError(KubeError):
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class TransientError(KubeError):
    """A 5xx answer, a timeout or a broken connection: the call may succeed if tried again."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class QuietWatchError(TransientError):
    """A watch heard nothing, not even a bookmark, within its read timeout. A busy apiserver
    delays bookmarks, so this is normal for a kind that rarely changes; it may also be a dead
    connection, which the next request finds out."""


def rejected_by_unreachable_webhook(err: BaseException) -> bool:
    """The apiserver could not call an admission webhook (a webhook replica crashed mid-call,
    or none was ready) and refused the write before storing anything, so sending the same
    create again cannot make a second object."""
    return isinstance(err, TransientError) and "failed calling webhook" in str(err)


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from an apiserver; fall back to our own backoff


def error_from_response(status: int, body: bytes | str, *, retry_after: str | None = None, what: str = "") -> KubeError:
    """The typed error for a non-2xx answer; `what` names the call (`PATCH Workload ns/name`)."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    reason, message = "", text.strip()[:2000]
    details: dict[str, Any] = {}
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            message = str(parsed.get("message") or message)
            reason = str(parsed.get("reason") or "")
            details = parsed.get("details") or {}
    except ValueError:
        pass
    full = f"{what}: {message}" if what else message
    after = parse_retry_after(retry_after)
    kwargs: dict[str, Any] = {"status": status, "reason": reason, "details": details}
    if status == 404:
        return NotFoundError(full, **kwargs)
    if status == 409:
        return (AlreadyExistsError if reason == "AlreadyExists" else ConflictError)(full, **kwargs)
    if status == 410:
        return GoneError(full, **kwargs)
    if status == 401:
        return UnauthorizedError(full, **kwargs)
    if status == 403:
        return ForbiddenError(full, **kwargs)
    if status in (400, 422):
        return InvalidError(full, **kwargs)
    if status == 429:
        return TooManyRequestsError(full, retry_after=after, **kwargs)
    if status >= 500:
        return TransientError(full, retry_after=after, **kwargs)
    return KubeError(full, **kwargs)
