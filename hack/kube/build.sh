#!/usr/bin/env bash
# Build (or reuse) the control-plane binaries for kfed's local clusters.
#
#   hack/kube/build.sh            prints the directory holding kube-apiserver, etcd, kwok, ...
#
# The binaries are cached by version under ${KFED_CACHE_DIR:-~/.cache/kfed}; a build happens
# only when a pin in versions.env changes. Nothing built here is ever committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
cached_build "kube-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}" "build the local control plane" \
  "building Kubernetes ${KUBERNETES_VERSION} + etcd ${ETCD_VERSION} from Go modules"
cd "$here"
python3 gen_gomod.py
go mod tidy >&2
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
stamp_version=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp_version+=" -X $pkg.gitVersion=${KUBERNETES_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  stamp_version+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
go build -trimpath -ldflags "-s -w${stamp_version}" -o "$out/kube" . >&2
for name in kube-apiserver kube-controller-manager kube-scheduler etcd kubectl; do
  ln -sf kube "$out/$name"
done
GOBIN="$out" go install "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" >&2
finish_build "$out" "$out" "$out"
