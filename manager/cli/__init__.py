"""The `kfed` command line."""
