"""MultiKueue on the manager, in two packages: `rules`, the federation's pure rules (what to
dispatch where, capacity, worker selection, queue propagation, quota automation, the read API's
answers, kubeconfig validation), and `controllers`, the thin I/O shell that reads the clusters,
asks the rules and applies their answers. The import contracts in pyproject.toml keep `rules`
free of I/O and below `controllers`."""
