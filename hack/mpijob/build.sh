#!/usr/bin/env bash
# Build (or reuse) the Kubeflow MPI Operator for `kfed dev up --integrations mpijob` and the tests.
#
#   hack/mpijob/build.sh        prints the directory holding mpi-operator and crds/
#
# The controller (the main package cmd/mpi-operator of the pinned github.com/kubeflow/mpi-operator
# module) is built through a generated wrapper module and cached by version under
# ${KFED_CACHE_DIR:-~/.cache/kfed}, with the release's MPIJob CRD beside it. The operator serves
# no webhook, so there is no webhook manifest. Its health-check address is made settable (see the
# patch below). Nothing built here is ever committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
cached_build "mpi-operator-${MPI_OPERATOR_VERSION}" "build the MPI Operator ${MPI_OPERATOR_VERSION}" "building the MPI Operator ${MPI_OPERATOR_VERSION} from its Go module"
mkdir -p "$out/module" "$out/crds"
# Writes the wrapper go.mod (with the operator's own replace directives, if any) and prints the
# module's directory and commit.
{ read -r source_dir; read -r commit; } < <(python3 "$here/../gen_wrapper_gomod.py" github.com/kubeflow/mpi-operator "$MPI_OPERATOR_VERSION" "$out/module")
# The operator's own go.sum (part of its module, which the checksum database vouches for) pins
# every dependency's hash, so the build needs no further checksum look-ups.
cp "$source_dir/go.sum" "$out/module/go.sum"
chmod u+w "$out/module/go.sum"
# The one change to the release: its health-check server listens on a hard-coded :8080 (a
# constant, which -ldflags cannot set), so the second operator on a machine that runs several
# local clusters would die at start. The wrapper builds a copy of the module (Go refuses
# overlays of the module cache) whose server.go takes the address from
# KFED_MPI_OPERATOR_HEALTH_ADDR when it is set, and listens on :8080 otherwise.
server_go="cmd/mpi-operator/app/server.go"
grep -q 'Addr:    fmt.Sprintf(":%d", healthCheckPort),' "$source_dir/$server_go" || {
  echo "$source_dir/$server_go no longer serves health checks on healthCheckPort; revisit hack/mpijob/build.sh" >&2
  exit 1
}
cp -r "$source_dir" "$out/source"
chmod -R u+w "$out/source"
sed -i 's|Addr:    fmt.Sprintf(":%d", healthCheckPort),|Addr:    kfedHealthAddress(),|' "$out/source/$server_go"
cat >> "$out/source/$server_go" <<'GO'

// kfedHealthAddress is added by kfed's hack/mpijob/build.sh: several operators, one per local
// cluster, share a machine, so each needs its own health-check port.
func kfedHealthAddress() string {
	if address := os.Getenv("KFED_MPI_OPERATOR_HEALTH_ADDR"); address != "" {
		return address
	}
	return fmt.Sprintf(":%d", healthCheckPort)
}
GO
printf '\nreplace github.com/kubeflow/mpi-operator => ../source\n' >> "$out/module/go.mod"
cd "$out/module"
ldflags="-s -w"
ldflags+=" -X github.com/kubeflow/mpi-operator/pkg/version.Version=${MPI_OPERATOR_VERSION}"
ldflags+=" -X github.com/kubeflow/mpi-operator/pkg/version.GitSHA=${commit}"
# -mod=mod lets the wrapper's go.mod stay one line: the versions are exactly those the operator's
# go.mod selects.
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/mpi-operator" github.com/kubeflow/mpi-operator/cmd/mpi-operator >&2
cp "$source_dir/manifests/base/kubeflow.org_mpijobs.yaml" "$out/crds/"
chmod -R u+w "$out/crds"
finish_build "$out" "$out" "$out/mpi-operator"
