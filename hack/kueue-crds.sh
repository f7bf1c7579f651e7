#!/usr/bin/env bash
# Fetch (or reuse) upstream Kueue's CRDs, the ones kfed's must accept everything of.
#
#   hack/kueue-crds.sh        prints the directory holding Kueue's config/components/crd/bases
#
# They come from Kueue's Go module at the pinned version (KUEUE_VERSION overrides it), through
# the Go module proxy, and are cached by version under ${KFED_CACHE_DIR:-~/.cache/kfed}.
# Nothing fetched here is ever committed.
set -euo pipefail
# shellcheck source=lib/cache.sh
source "$(cd "$(dirname "$0")" && pwd)/lib/cache.sh"
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
out=$(cache_dir "kueue-crds-${KUEUE_VERSION}")
reuse_if_complete "$out"
require_go "download Kueue ${KUEUE_VERSION}'s CRDs from its Go module"
# `go mod download` needs no go.mod when given module@version; it prints where the module is.
if ! json=$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}"); then
  printf 'go mod download sigs.k8s.io/kueue@%s failed:\n%s\n' "${KUEUE_VERSION}" "$json" >&2
  exit 1
fi
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
bases="$dir/config/components/crd/bases"
if [[ -z "$dir" || ! -d "$bases" ]]; then
  echo "go mod download sigs.k8s.io/kueue@${KUEUE_VERSION} gave no config/components/crd/bases:" >&2
  printf '%s\n' "$json" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out"
cp "$bases"/*.yaml "$out/"
mark_complete "$out"
