"""The asyncio runtime: work queues, the controller loop, probes, metrics, logs and shutdown."""
