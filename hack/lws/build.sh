#!/usr/bin/env bash
# Build (or reuse) the LeaderWorkerSet controller for `kfed dev up --integrations lws` and the tests.
#
#   hack/lws/build.sh        prints the directory holding lws-controller, crds/ and webhook-manifests.yaml
#
# The controller (the main package sigs.k8s.io/lws/cmd of the pinned sigs.k8s.io/lws module) is
# built through a generated wrapper module and cached by version under
# ${KFED_CACHE_DIR:-~/.cache/kfed}, with the release's CRD and webhook manifests beside it.
# Nothing built here is ever committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
cached_build "lws-${LWS_VERSION}" "build LeaderWorkerSet ${LWS_VERSION}" "building LeaderWorkerSet ${LWS_VERSION} from its Go module"
mkdir -p "$out/module" "$out/crds"
# Writes the wrapper go.mod (with LWS's own replace directives, if any) and prints the module's
# directory and commit.
{ read -r source_dir; read -r commit; } < <(python3 "$here/../gen_wrapper_gomod.py" sigs.k8s.io/lws "$LWS_VERSION" "$out/module")
# LWS's own go.sum (part of its module, which the checksum database vouches for) pins every
# dependency's hash, so the build needs no further checksum look-ups.
cp "$source_dir/go.sum" "$out/module/go.sum"
chmod u+w "$out/module/go.sum"
cd "$out/module"
ldflags="-s -w"
ldflags+=" -X sigs.k8s.io/lws/pkg/version.GitVersion=${LWS_VERSION}"
ldflags+=" -X sigs.k8s.io/lws/pkg/version.GitCommit=${commit}"
# -mod=mod lets the wrapper's go.mod stay one line: the versions are exactly those LWS's go.mod selects.
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/lws-controller" sigs.k8s.io/lws/cmd >&2
cp "$source_dir/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" "$out/crds/"
cp "$source_dir/config/webhook/manifests.yaml" "$out/webhook-manifests.yaml"
chmod -R u+w "$out/crds" "$out/webhook-manifests.yaml"
finish_build "$out" "$out" "$out/lws-controller"
