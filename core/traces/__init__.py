"""Trace readers, synthetic generators and the downloader."""

from kubesage.core.traces.openb import read_nodes, read_pods, write_pods

__all__ = ["read_nodes", "read_pods", "write_pods"]
