#!/usr/bin/env bash
# Build (or reuse) the JobSet controller for `kfed dev up --integrations jobset` and the tests.
#
#   hack/jobset/build.sh        prints the directory holding jobset-controller, crds/ and webhook-manifests.yaml
#
# The controller (the main package at the root of the pinned sigs.k8s.io/jobset module) is built
# through a generated wrapper module and cached by version under ${KFED_CACHE_DIR:-~/.cache/kfed},
# with the release's CRD and webhook manifests beside it. Nothing built here is ever committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${KFED_CACHE_DIR:-$HOME/.cache/kfed}
out="$cache/jobset-${JOBSET_VERSION}"
stamp="$out/.complete"
if [[ -f "$stamp" ]]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build JobSet ${JOBSET_VERSION} (https://go.dev/dl)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/module" "$out/crds"
start=$(date +%s)
echo "building JobSet ${JOBSET_VERSION} from its Go module into $out (first build takes a few minutes)" >&2
# Writes the wrapper go.mod (with JobSet's own replace directives, if any) and prints the
# module's directory and commit.
{ read -r source_dir; read -r commit; } < <(python3 "$here/../gen_wrapper_gomod.py" sigs.k8s.io/jobset "$JOBSET_VERSION" "$out/module")
# JobSet's own go.sum (part of its module, which the checksum database vouches for) pins every
# dependency's hash, so the build needs no further checksum look-ups.
cp "$source_dir/go.sum" "$out/module/go.sum"
chmod u+w "$out/module/go.sum"
cd "$out/module"
ldflags="-s -w"
ldflags+=" -X sigs.k8s.io/jobset/pkg/version.GitVersion=${JOBSET_VERSION}"
ldflags+=" -X sigs.k8s.io/jobset/pkg/version.GitCommit=${commit}"
# -mod=mod lets the wrapper's go.mod stay one line: the versions are exactly those JobSet's
# go.mod selects.
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/jobset-controller" sigs.k8s.io/jobset >&2
cp "$source_dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$out/crds/"
cp "$source_dir/config/components/webhook/manifests.yaml" "$out/webhook-manifests.yaml"
chmod -R u+w "$out/crds" "$out/webhook-manifests.yaml"
echo "built in $(( $(date +%s) - start ))s; size: $(du -sh "$out/jobset-controller" | cut -f1)" >&2
touch "$stamp"
echo "$out"
