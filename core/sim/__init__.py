"""Trace-replay simulator: FGD protocol and time replay through the live policy code."""
