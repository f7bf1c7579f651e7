#!/usr/bin/env bash
# The test command: lint, type-check, check import boundaries and CRD drift, then run every
# tier (unit, integration, e2e) against real control planes from the local harness.
# Extra arguments go to pytest (for example -m unit, or -k harness).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$("$root/hack/bootstrap.sh")
export PATH="$venv/bin:$PATH"
echo "==> ruff" >&2
ruff check .
ruff format --check .
echo "==> mypy --strict" >&2
mypy
echo "==> import boundaries" >&2
lint-imports
echo "==> Dockerfile lint" >&2
if command -v hadolint >/dev/null; then hadolint Dockerfile; else python hack/lint_dockerfile.py Dockerfile; fi
echo "==> CRDs match the models" >&2
kfed crds --check
echo "==> the job kinds' RBAC in deploy/ matches the adapters" >&2
kfed rbac --check
# The Go builds below serve the real-cluster tiers only. On a cold machine they take most of an
# hour, so a selection of unit tests alone (`./hack/test.sh -m unit`, a file of tests/unit/)
# skips them: pytest lists what the arguments select, and a test outside tests/unit/ needs them.
needs_clusters=yes
if [[ $# -gt 0 ]]; then
  selected=$(pytest --collect-only -q "$@" 2>/dev/null | grep '::' || true)
  if [[ -n $selected ]] && ! grep -qv '^tests/unit/' <<<"$selected"; then
    needs_clusters=no
  fi
fi
if [[ $needs_clusters == no ]]; then
  echo "==> unit tests only: no control plane, Kueue or job controller to build" >&2
  echo "==> pytest" >&2
  exec pytest "$@"
fi
echo "==> control-plane binaries (built once per version, cached in ~/.cache/kfed)" >&2
bin_dir=$(bash hack/kube/build.sh)
export KFED_KUBE_BIN_DIR="$bin_dir"
echo "==> helm (built once per version, cached in ~/.cache/kfed)" >&2
KFED_HELM=$(bash hack/helm.sh)
export KFED_HELM
echo "==> upstream Kueue for the interoperability tests (built once per version, cached in ~/.cache/kfed)" >&2
KFED_KUEUE_BIN=$(bash hack/kueue/build.sh)
export KFED_KUEUE_BIN
echo "==> a visibility API client built with upstream Kueue's clientset (built once per version, cached in ~/.cache/kfed)" >&2
KFED_KUEUE_VISIBILITY_CLIENT=$(bash hack/kueue/build.sh visibility-client)/kueue-visibility-client
export KFED_KUEUE_VISIBILITY_CLIENT
# The job controllers that `kfed dev up --integrations` runs, one a line from their table
# (manager/dev/catalog.py): the variable naming its directory, its build script, what it builds,
# and the integrations it serves. Read through fd 3, so that a build script keeps this stdin.
controllers=$("$venv/bin/python" -m manager.dev.catalog)
while IFS=$'\t' read -r -u 3 variable script what integrations; do
  echo "==> $what for \`kfed dev up --integrations $integrations\` (built once per version, cached in ~/.cache/kfed)" >&2
  directory=$(bash "$script")
  export "$variable=$directory"
done 3<<<"$controllers"
echo "==> helm lint" >&2
"$KFED_HELM" lint --strict deploy/helm/kfed >&2
echo "==> pytest" >&2
exec pytest "$@"
