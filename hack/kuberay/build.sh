#!/usr/bin/env bash
# Build (or reuse) the KubeRay operator for `kfed dev up --integrations rayjob,raycluster` and the tests.
#
#   hack/kuberay/build.sh        prints the directory holding ray-operator and crds/
#
# The operator (the main package at the root of the pinned github.com/ray-project/kuberay/ray-operator
# module) is built through a generated wrapper module and cached by version under
# ${KFED_CACHE_DIR:-~/.cache/kfed}, with the release's RayCluster and RayJob CRDs beside it
# (RayService is not a kind kfed queues). The operator's only webhook validates RayClusters and
# runs only with ENABLE_WEBHOOKS=true, so no webhook manifest is kept. Nothing built here is ever
# committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
module=github.com/ray-project/kuberay/ray-operator
cached_build "kuberay-${KUBERAY_VERSION}" "build KubeRay ${KUBERAY_VERSION}" "building the KubeRay operator ${KUBERAY_VERSION} from its Go module"
mkdir -p "$out/module" "$out/crds"
# Writes the wrapper go.mod (with the operator's own replace directives, if any) and prints the
# module's directory and commit.
{ read -r source_dir; read -r commit; } < <(python3 "$here/../gen_wrapper_gomod.py" "$module" "$KUBERAY_VERSION" "$out/module")
# The operator's own go.sum (part of its module, which the checksum database vouches for) pins
# every dependency's hash, so the build needs no further checksum look-ups.
cp "$source_dir/go.sum" "$out/module/go.sum"
chmod u+w "$out/module/go.sum"
cd "$out/module"
# The operator's Makefile sets main._commitId_ and main._buildTime_, which v1.5.0's main package no
# longer declares, so there is no version to stamp; the commit is only said.
echo "KubeRay ${KUBERAY_VERSION} is commit ${commit}" >&2
ldflags="-s -w"
# -mod=mod lets the wrapper's go.mod stay one line: the versions are exactly those the operator's go.mod selects.
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/ray-operator" "$module" >&2
for kind in rayclusters rayjobs; do
  cp "$source_dir/config/crd/bases/ray.io_${kind}.yaml" "$out/crds/"
done
chmod -R u+w "$out/crds"
finish_build "$out" "$out" "$out/ray-operator"
