"""The pure admission engine (quota tree, queues, flavor assignment, preemption). Lands with issue 3."""
