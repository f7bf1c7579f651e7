"""The worker cluster's agent: single-cluster admission plus adoption of prebuilt Workloads.

It is composed from `manager`'s single-cluster pieces and never imports `manager.multikueue`
or `manager.cli` (an import-linter contract checks this). The controllers land with issue 5;
until then this package holds no entry point.
"""
