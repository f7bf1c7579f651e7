"""`kfed dashboard`: the fleet in a browser. A client of the manager's apiserver like the rest of
the CLI: every read and action is the user's own (their kubeconfig, or in the cluster their
bearer token, checked with SubjectAccessReview), and what is shown is decided by the CLI's own
view builders (`manager.cli.views`, `manager.cli.explain`) and `pages.py`, rendered by Jinja2."""
