#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv with kfed and its dev tools.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${KFED_VENV:-$root/.venv}
if [[ ! -x "$venv/bin/python" ]]; then
  echo "==> creating $venv" >&2
  python3 -m venv "$venv"
fi
stamp="$venv/.kfed-installed"
constraints="$root/hack/constraints.txt"
if [[ ! -f "$stamp" || "$root/pyproject.toml" -nt "$stamp" || "$constraints" -nt "$stamp" ]]; then
  echo "==> installing kfed and its dev tools into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  # Pinned to the versions the tests last passed with (hack/constraints.txt).
  "$venv/bin/python" -m pip install --quiet -c "$constraints" -e "$root[dev]" >&2
  touch "$stamp"
fi
echo "$venv"
