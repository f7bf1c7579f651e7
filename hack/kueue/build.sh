#!/usr/bin/env bash
# Build (or reuse) upstream Kueue for the interoperability tests (tests/e2e/test_upstream_kueue.py).
#
#   hack/kueue/build.sh         prints the directory holding kueue, crds/ and webhook-manifests.yaml
#
# The manager binary is built from the pinned sigs.k8s.io/kueue module (cmd/kueue) through a
# generated wrapper module, and cached by version under ${KFED_CACHE_DIR:-~/.cache/kfed}, with
# the release's CRDs and webhook manifests beside it. Nothing built here is ever committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
cached_build "kueue-${KUEUE_VERSION}" "build upstream Kueue ${KUEUE_VERSION}" \
  "building Kueue ${KUEUE_VERSION} from its Go module"
mkdir -p "$out/module" "$out/crds"
# Writes the wrapper go.mod (with Kueue's own replace directives) and prints the module's
# directory and commit.
{ read -r source_dir; read -r commit; } < <(python3 "$here/../gen_wrapper_gomod.py" sigs.k8s.io/kueue "$KUEUE_VERSION" "$out/module")
# Kueue's own go.sum (part of its module, which the checksum database vouches for) pins every
# dependency's hash, so the build needs no further checksum look-ups.
cp "$source_dir/go.sum" "$out/module/go.sum"
chmod u+w "$out/module/go.sum"
cd "$out/module"
ldflags="-s -w"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitCommit=${commit}"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
# -mod=mod lets the wrapper's go.mod stay one line: the versions are exactly those Kueue's
# go.mod selects.
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/kueue" sigs.k8s.io/kueue/cmd/kueue >&2
cp "$source_dir"/config/components/crd/bases/*.yaml "$out/crds/"
cp "$source_dir/config/components/webhook/manifests.yaml" "$out/webhook-manifests.yaml"
chmod -R u+w "$out/crds" "$out/webhook-manifests.yaml"
finish_build "$out" "$out" "$out/kueue"
