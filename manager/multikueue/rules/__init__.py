"""The federation's pure rules: no I/O, no clock, no randomness (time and chance come in as
arguments). Each module decides; `manager.multikueue.controllers` applies."""
