#!/usr/bin/env bash
# Build (or reuse) the Kubeflow Trainer controller manager for `kfed dev up --integrations trainjob`
# and the tests.
#
#   hack/trainer/build.sh        prints the directory holding trainer-controller-manager, crds/,
#                                webhook-manifests.yaml and runtimes/
#
# The controller (the main package cmd/trainer-controller-manager of the pinned
# github.com/kubeflow/trainer/v2 module) is built through a generated wrapper module and cached by
# version under ${KFED_CACHE_DIR:-~/.cache/kfed}, with the release's three CRDs, its webhook
# manifests and its `torch-distributed` ClusterTrainingRuntime beside it. The controller runs
# unchanged: its certificate management is a Configuration field (`certManagement.enable`), so no
# patch is needed to serve a certificate the harness issues. Nothing built here is ever committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
module=github.com/kubeflow/trainer/v2
cached_build "trainer-${TRAINER_VERSION}" "build Kubeflow Trainer ${TRAINER_VERSION}" "building the Kubeflow Trainer controller manager ${TRAINER_VERSION} from its Go module"
mkdir -p "$out/module" "$out/crds" "$out/runtimes"
# Writes the wrapper go.mod (with the trainer's own replace directives, if any) and prints the
# module's directory and commit.
{ read -r source_dir; read -r commit; } < <(python3 "$here/../gen_wrapper_gomod.py" "$module" "$TRAINER_VERSION" "$out/module")
# The trainer's own go.sum (part of its module, which the checksum database vouches for) pins
# every dependency's hash, so the build needs no further checksum look-ups.
cp "$source_dir/go.sum" "$out/module/go.sum"
chmod u+w "$out/module/go.sum"
cd "$out/module"
# The main package declares no version variable, so there is nothing to stamp; the commit is only said.
echo "Kubeflow Trainer ${TRAINER_VERSION} is commit ${commit}" >&2
# -mod=mod lets the wrapper's go.mod stay one line: the versions are exactly those the trainer's go.mod selects.
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$out/trainer-controller-manager" "$module/cmd/trainer-controller-manager" >&2
for kind in trainjobs trainingruntimes clustertrainingruntimes; do
  cp "$source_dir/manifests/base/crds/trainer.kubeflow.org_${kind}.yaml" "$out/crds/"
done
cp "$source_dir/manifests/base/webhook/manifests.yaml" "$out/webhook-manifests.yaml"
cp "$source_dir/manifests/base/runtimes/torch_distributed.yaml" "$out/runtimes/"
chmod -R u+w "$out/crds" "$out/runtimes" "$out/webhook-manifests.yaml"
finish_build "$out" "$out" "$out/trainer-controller-manager"
