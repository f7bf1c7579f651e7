#!/usr/bin/env bash
# Build (or reuse) the helm binary the deploy tests render the chart with.
#
#   hack/helm.sh        prints the path of helm
#
# A helm on PATH at the pinned version is used as is; otherwise it is built from its Go module
# (about a minute on 2 cores) and cached by version under ${KFED_CACHE_DIR:-~/.cache/kfed}.
# Nothing built here is ever committed.
set -euo pipefail
HELM_VERSION=v3.19.5
# The Kubernetes minor of the client modules helm v3.19 is built with; `helm template` and
# `helm lint` assume this cluster version, as in helm's own release builds.
HELM_K8S_MINOR=34
if command -v helm >/dev/null && [[ "$(helm version --template '{{.Version}}' 2>/dev/null)" == "$HELM_VERSION" ]]; then
  command -v helm
  exit 0
fi
cache=${KFED_CACHE_DIR:-$HOME/.cache/kfed}
out="$cache/helm-${HELM_VERSION}"
if [[ -x "$out/helm" && -f "$out/.complete" ]]; then
  echo "$out/helm"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build helm ${HELM_VERSION} (https://go.dev/dl), or put helm ${HELM_VERSION} on PATH" >&2; exit 1; }
mkdir -p "$out"
start=$(date +%s)
ldflags="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=${HELM_K8S_MINOR}"
done
echo "building helm ${HELM_VERSION} from its Go module into $out" >&2
GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w $ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
echo "built in $(( $(date +%s) - start ))s" >&2
touch "$out/.complete"
echo "$out/helm"
