"""Job integrations: one adapter per job kind, the registry of kinds, and `plan_job`, which
decides every step of the job reconciler for any kind (pure)."""
