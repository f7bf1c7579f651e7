#!/usr/bin/env bash
# Build (or reuse) the helm binary the deploy tests render the chart with.
#
#   hack/helm.sh        prints the path of helm
#
# A helm on PATH at the pinned version is used as is; otherwise it is built from its Go module
# (about a minute on 2 cores) and cached by version under ${KFED_CACHE_DIR:-~/.cache/kfed}.
# Nothing built here is ever committed.
set -euo pipefail
# shellcheck source=lib/cache.sh
source "$(cd "$(dirname "$0")" && pwd)/lib/cache.sh"
HELM_VERSION=v3.19.5
# The Kubernetes minor of the client modules helm v3.19 is built with; `helm template` and
# `helm lint` assume this cluster version, as in helm's own release builds.
HELM_K8S_MINOR=34
if command -v helm >/dev/null && [[ "$(helm version --template '{{.Version}}' 2>/dev/null)" == "$HELM_VERSION" ]]; then
  command -v helm
  exit 0
fi
out=$(cache_dir "helm-${HELM_VERSION}")
if [[ -x "$out/helm" ]]; then
  reuse_if_complete "$out" "$out/helm"
fi
require_go "build helm ${HELM_VERSION}" ", or put helm ${HELM_VERSION} on PATH"
mkdir -p "$out"
ldflags="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=${HELM_K8S_MINOR}"
done
start_build "building helm ${HELM_VERSION} from its Go module into $out"
GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w $ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
finish_build "$out" "$out/helm"
