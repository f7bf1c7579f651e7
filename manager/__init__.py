"""kfed's manager: the admission engine, the single-cluster controllers, MultiKueue and the CLI.

A regular package, not a namespace one: a namespace package would join every `manager/`
directory on the path (a git worktree's and the editable install's), and import-linter
would then check a mix of both trees.
"""
