"""Kubernetes objects kubesage writes: offline schema validation (more with issue 5)."""
