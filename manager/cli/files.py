"""Reading manifest paths for the CLI: files, directories (recursively) or `-` for stdin."""

from __future__ import annotations

import sys
from pathlib import Path

from manager.api.manifest import Document, Loaded, ManifestError, load_text
from manager.api.validation import FieldError

YAML_SUFFIXES = (".yaml", ".yml", ".json")


def checkout_crds_dir() -> Path | None:
    """crds/ of the checkout this package runs from, if there is one."""
    beside = Path(__file__).resolve().parents[2] / "crds"
    return beside if beside.is_dir() else None


def expand(paths: list[str]) -> list[Path | None]:
    """Files to read, in a stable order; None stands for standard input."""
    out: list[Path | None] = []
    for raw in paths:
        if raw == "-":
            out.append(None)
            continue
        path = Path(raw)
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in YAML_SUFFIXES)
        else:
            out.append(path)
    return out


def load_paths(paths: list[str]) -> Loaded:
    """Load every document from every path; unreadable files become errors, not tracebacks."""
    result = Loaded()
    for path in expand(paths):
        source = "<stdin>" if path is None else str(path)
        try:
            # Bytes: the reader checks the encoding and reports the offset of a bad byte.
            raw = sys.stdin.buffer.read() if path is None else path.read_bytes()
        except OSError as err:
            result.errors.append(ManifestError(Document(source, 0, None), FieldError("", f"cannot read file: {err.strerror or err}")))
            continue
        result.extend(load_text(raw, source))
    return result
