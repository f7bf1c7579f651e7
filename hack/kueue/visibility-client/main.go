// kueue-visibility-client asks Kueue's visibility API for pending Workloads with the clientset of
// the pinned Kueue module, so that the answer is decoded by Kueue's own types, not by kfed's. The
// interoperability tests point it at a kfed manager (hack/kueue/build.sh visibility-client builds it).
//
//	kueue-visibility-client --kubeconfig FILE [--as USER] [--version v1beta2|v1beta1] [--limit N] [--offset N] clusterqueue NAME
//	kueue-visibility-client --kubeconfig FILE [--as USER] localqueue NAMESPACE NAME
//
// It prints one JSON object: {"items": [{"name", "namespace", "localQueueName", "priority",
// "positionInClusterQueue", "positionInLocalQueue"}]}, or exits 1 with the error on stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/kueue/client-go/clientset/versioned"
)

type item struct {
	Name                   string `json:"name"`
	Namespace              string `json:"namespace"`
	LocalQueueName         string `json:"localQueueName"`
	Priority               int32  `json:"priority"`
	PositionInClusterQueue int32  `json:"positionInClusterQueue"`
	PositionInLocalQueue   int32  `json:"positionInLocalQueue"`
}

func main() {
	// A flag set of its own: a package Kueue's clientset pulls in registers --kubeconfig on the global one.
	flags := flag.NewFlagSet("kueue-visibility-client", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig file")
	as := flags.String("as", "", "impersonate this user")
	version := flags.String("version", "v1beta2", "v1beta2 or v1beta1")
	_ = flags.Parse(os.Args[1:])
	args := flags.Args()
	if err := run(*kubeconfig, *as, *version, args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(kubeconfig, as, version string, args []string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	config.Impersonate.UserName = as
	clients, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var items []item
	switch {
	case len(args) == 2 && args[0] == "clusterqueue" && version == "v1beta2":
		summary, err := clients.VisibilityV1beta2().ClusterQueues().GetPendingWorkloadsSummary(ctx, args[1], metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, w := range summary.Items {
			items = append(items, item{w.Name, w.Namespace, string(w.LocalQueueName), w.Priority, w.PositionInClusterQueue, w.PositionInLocalQueue})
		}
	case len(args) == 2 && args[0] == "clusterqueue" && version == "v1beta1":
		summary, err := clients.VisibilityV1beta1().ClusterQueues().GetPendingWorkloadsSummary(ctx, args[1], metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, w := range summary.Items {
			items = append(items, item{w.Name, w.Namespace, string(w.LocalQueueName), w.Priority, w.PositionInClusterQueue, w.PositionInLocalQueue})
		}
	case len(args) == 3 && args[0] == "localqueue" && version == "v1beta2":
		summary, err := clients.VisibilityV1beta2().LocalQueues(args[1]).GetPendingWorkloadsSummary(ctx, args[2], metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, w := range summary.Items {
			items = append(items, item{w.Name, w.Namespace, string(w.LocalQueueName), w.Priority, w.PositionInClusterQueue, w.PositionInLocalQueue})
		}
	default:
		return fmt.Errorf("usage: kueue-visibility-client --kubeconfig FILE [--as USER] [--version v1beta2|v1beta1] clusterqueue NAME | localqueue NAMESPACE NAME")
	}
	if items == nil {
		items = []item{}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string][]item{"items": items})
}
