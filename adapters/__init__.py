"""Workload adapters; each registers through the ``kubesage.adapters`` entry-point group."""
