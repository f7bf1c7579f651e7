"""MultiKueue on the manager: worker cluster connections, the admission check, Workload
dispatch and sync, and the garbage collector. Pure planners live in `plan.py` and
`kubeconfig.py`; the rest is the thin I/O shell around them."""
