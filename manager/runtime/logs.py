"""Structured JSON logs: one object a line, the message plus the fields passed in `extra`.

Fields whose names suggest a credential are replaced before they are written, as a last
line of defence: the code never passes secrets, tokens or kubeconfigs to a log call.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_SENSITIVE = ("token", "secret", "password", "kubeconfig", "key-data", "certificate-data", "authorization")
REDACTED = "[redacted]"


def _redact(name: str, value: Any) -> Any:
    lowered = name.lower()
    if any(word in lowered for word in _SENSITIVE):
        return REDACTED
    return value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                entry[name] = _redact(name, value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str = "info", *, stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The client libraries log request bodies at debug level, which can hold Secrets.
    for noisy in ("kubernetes_asyncio", "aiohttp.access", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
