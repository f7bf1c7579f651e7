"""Real Kubernetes control planes on one machine, for `kfed dev` and the test suite.

`local` runs etcd, kube-apiserver and (optionally) kube-controller-manager, kube-scheduler
and kwok as processes on loopback, built from published Go modules by hack/kube/build.sh.
`kind` does the same with kind clusters where a container engine is present.
"""
