"""Fakes for components that cannot run on a test machine (a Kubernetes API server)."""
