#!/usr/bin/env bash
# Build (or reuse) upstream Kueue for the interoperability tests (tests/e2e/test_upstream_kueue.py)
# and for the side-by-side benchmark (benchmarks/compare_kueue.py).
#
#   hack/kueue/build.sh         prints the directory holding kueue, crds/ and webhook-manifests.yaml
#   hack/kueue/build.sh perf    prints the directory holding Kueue's scheduler performance harness:
#                               runner and minimalkueue (test/performance/scheduler), crds/ and
#                               configs/ (the harness's generator configurations)
#   hack/kueue/build.sh worker-limits
#                               prints the directory holding kueue, crds/ and webhook-manifests.yaml
#                               like the manager's, built with one change (see below): the clients
#                               of a MultiKueue manager to its workers take their QPS and burst from
#                               KFED_KUEUE_WORKER_QPS and KFED_KUEUE_WORKER_BURST when set (v0.19.2
#                               leaves them at client-go's 5 and 10 with no setting; v0.20 raised
#                               them). For benchmarks/compare_kueue.py's MultiKueue part only.
#   hack/kueue/build.sh visibility-client
#                               prints the directory holding kueue-visibility-client, a client of
#                               the visibility API built with Kueue's own clientset
#                               (hack/kueue/visibility-client/main.go)
#
# Each is built from the pinned sigs.k8s.io/kueue module (the manager from cmd/kueue, the harness
# from test/performance/scheduler, both inside the module's zip) through a generated wrapper
# module, and cached by version under ${KFED_CACHE_DIR:-~/.cache/kfed}, with the release's CRDs
# beside it. Nothing built here is ever committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
target=${1:-manager}
case "$target" in
  manager) out_name="kueue-${KUEUE_VERSION}"; what="Kueue ${KUEUE_VERSION}'s manager" ;;
  worker-limits) out_name="kueue-worker-limits-${KUEUE_VERSION}"; what="Kueue ${KUEUE_VERSION}'s manager with settable worker client limits" ;;
  perf) out_name="kueue-perf-${KUEUE_VERSION}"; what="Kueue ${KUEUE_VERSION}'s scheduler performance runner and minimalkueue" ;;
  visibility-client)
    # The program's own source is part of the cache key: an edit builds it again.
    digest=$(sha256sum "$here/visibility-client/main.go" | cut -c1-12)
    out_name="kueue-visibility-client-${KUEUE_VERSION}-${digest}"
    what="a visibility API client with Kueue ${KUEUE_VERSION}'s clientset" ;;
  *) echo "usage: $0 [manager|perf|worker-limits|visibility-client]" >&2; exit 2 ;;
esac
cached_build "$out_name" "build upstream Kueue ${KUEUE_VERSION}" "building $what from its Go module"
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
build() { CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$1" "$2" >&2; }
if [[ "$target" == visibility-client ]]; then
  # A package of the wrapper module, compiled against the pinned Kueue's client-go.
  mkdir -p "$out/module/visibilityclient"
  cp "$here/visibility-client/main.go" "$out/module/visibilityclient/main.go"
  build "$out/kueue-visibility-client" ./visibilityclient
  finish_build "$out"
  exit 0
fi
if [[ "$target" == worker-limits ]]; then
  # The one change: the rest.Config of each worker's client (clientConfig.toRESTConfig) gets its
  # QPS and burst from the environment when they are set. The build stops if the line it
  # changes is not there any more. Go refuses overlays of the module cache: a copy is built.
  cluster_go="pkg/controller/admissionchecks/multikueue/multikueuecluster.go"
  line='	return clientcmd.RESTConfigFromKubeConfig(c.Kubeconfig)'
  [[ $(grep -cxF "$line" "$source_dir/$cluster_go") == 1 ]] || {
    echo "$source_dir/$cluster_go no longer builds a worker's rest.Config in toRESTConfig; revisit hack/kueue/build.sh" >&2
    exit 1
  }
  cp -r "$source_dir" "$out/source"
  chmod -R u+w "$out/source"
  sed -i 's|^\treturn clientcmd.RESTConfigFromKubeConfig(c.Kubeconfig)$|\treturn kfedWorkerLimits(clientcmd.RESTConfigFromKubeConfig(c.Kubeconfig))|' "$out/source/$cluster_go"
  cat > "$out/source/pkg/controller/admissionchecks/multikueue/kfed_worker_limits.go" <<'GO'
package multikueue

// Added by kfed's hack/kueue/build.sh worker-limits, for a benchmark at equal client limits.

import (
	"os"
	"strconv"

	"k8s.io/client-go/rest"
)

// kfedWorkerLimits sets a worker client's QPS and burst from KFED_KUEUE_WORKER_QPS and
// KFED_KUEUE_WORKER_BURST when they are set, and leaves client-go's defaults otherwise.
func kfedWorkerLimits(config *rest.Config, err error) (*rest.Config, error) {
	if err != nil {
		return nil, err
	}
	if qps, parseErr := strconv.ParseFloat(os.Getenv("KFED_KUEUE_WORKER_QPS"), 32); parseErr == nil {
		config.QPS = float32(qps)
	}
	if burst, parseErr := strconv.Atoi(os.Getenv("KFED_KUEUE_WORKER_BURST")); parseErr == nil {
		config.Burst = burst
	}
	return config, nil
}
GO
  printf '\nreplace sigs.k8s.io/kueue => ../source\n' >> "$out/module/go.mod"
fi
if [[ "$target" == manager || "$target" == worker-limits ]]; then
  build "$out/kueue" sigs.k8s.io/kueue/cmd/kueue
  cp "$source_dir/config/components/webhook/manifests.yaml" "$out/webhook-manifests.yaml"
  chmod u+w "$out/webhook-manifests.yaml"
else
  harness=sigs.k8s.io/kueue/test/performance/scheduler
  if [[ ! -d "$source_dir/test/performance/scheduler/runner" ]]; then
    echo "Kueue ${KUEUE_VERSION}'s module has no test/performance/scheduler/runner" >&2
    exit 1
  fi
  build "$out/runner" "$harness/runner"
  build "$out/minimalkueue" "$harness/minimalkueue"
  cp -r "$source_dir/test/performance/scheduler/configs" "$out/configs"
  chmod -R u+w "$out/configs"
fi
cp "$source_dir"/config/components/crd/bases/*.yaml "$out/crds/"
chmod -R u+w "$out/crds"
finish_build "$out"
