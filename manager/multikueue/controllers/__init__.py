"""The federation's I/O shell: worker connections, the MultiKueue admission check, Workload
dispatch and sync, garbage collection, queue propagation, quota automation and the read API.
Each controller reads, asks `manager.multikueue.rules`, and writes what it answers."""
