"""The only code that talks to an apiserver."""
