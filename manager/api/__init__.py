"""kfed's API: pydantic models of every kind kfed reads or writes, quantities and constants.

This package is pure: it performs no I/O and imports nothing from the I/O shell.
"""
