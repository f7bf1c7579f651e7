"""A documented Dockerfile check, used where hadolint cannot be had (it is a Haskell binary
with no Go or PyPI build; CI installs neither). It enforces the rules #8 asks for:

- every instruction is a known Dockerfile instruction (a syntax check);
- at least two stages (multi-stage), each `FROM` pinned to a tag, never `latest`;
- the final stage sets a non-root `USER` (numeric, not 0) and has no compilers or `apt-get`;
- `COPY` rather than `ADD`; no `sudo`; no secrets in `ENV`.

Exit 0 when it passes; otherwise one line per problem, `Dockerfile:LINE: message`, and exit 1.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, instruction, arguments), with continuation lines joined."""
    out: list[tuple[int, str, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((start, word.upper() if word.upper() in INSTRUCTIONS else word, rest.strip()))
    return out


def lint(text: str) -> list[str]:
    problems = []
    parsed = instructions(text)
    stages = [i for i, (_, word, _) in enumerate(parsed) if word == "FROM"]
    for number, word, rest in parsed:
        if word not in INSTRUCTIONS:
            problems.append(f"{number}: unknown instruction {word!r}")
        if word == "FROM":
            image = rest.split()[0]
            if ":" not in image or image.endswith(":latest"):
                problems.append(f"{number}: FROM {image}: pin a tag (not latest)")
        if word == "ADD":
            problems.append(f"{number}: use COPY, not ADD")
        if word == "RUN" and re.search(r"\bsudo\b", rest):
            problems.append(f"{number}: no sudo")
        if word == "ENV" and re.search(r"(PASSWORD|TOKEN|SECRET)\w*=", rest, re.IGNORECASE):
            problems.append(f"{number}: no secrets in ENV")
    if len(stages) < 2:
        problems.append("1: use a multi-stage build")
    final = parsed[stages[-1] :] if stages else parsed
    users = [rest for _, word, rest in final if word == "USER"]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problems.append(f"{final[0][0] if final else 1}: the final stage must set a non-root USER")
    for number, word, rest in final:
        if word == "RUN" and re.search(r"\b(apt-get|gcc|g\+\+|make|build-essential)\b", rest):
            problems.append(f"{number}: no build tools or package installs in the final stage")
    return problems


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "Dockerfile")
    problems = lint(path.read_text())
    for problem in problems:
        print(f"{path}:{problem}", file=sys.stderr)
    if not problems:
        print(f"{path}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
