#!/usr/bin/env bash
# One command from a fresh clone to a running federation: install kfed, build the control
# plane (cached after the first run), start a manager and two workers that run real Jobs.
# Extra arguments go to `kfed dev up` (for example --workers 3 or --dir DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$("$root/hack/bootstrap.sh")
exec "$venv/bin/kfed" dev up --jobs "$@"
