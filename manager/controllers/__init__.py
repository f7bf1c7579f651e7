"""Single-cluster controllers: queues and admission, Job integration, webhooks, events."""
