// Command kube is one binary that runs the Kubernetes control-plane components kfed's test
// harness needs. It dispatches on the name it was invoked by (a symlink such as
// kube-apiserver) or, failing that, on its first argument: `kube kube-apiserver --help`.
//
// It exists so that real control planes can be built from published Go modules on machines
// without container images; see README.md in this folder.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubectl "k8s.io/kubectl/pkg/cmd"
)

const usage = "usage: kube {kube-apiserver|kube-controller-manager|kube-scheduler|etcd|kubectl} [flags]"

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if !isComponent(name) {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	// Each component parses os.Args itself, so present it with its own name first.
	os.Args = append([]string{name}, args...)
	switch name {
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "etcd":
		etcdmain.Main(os.Args)
	case "kubectl":
		os.Exit(cli.Run(kubectl.NewDefaultKubectlCommand()))
	default:
		fmt.Fprintf(os.Stderr, "unknown component %q\n%s\n", name, usage)
		os.Exit(2)
	}
}

func isComponent(name string) bool {
	switch name {
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kubectl":
		return true
	}
	return false
}
