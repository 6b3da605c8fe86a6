"""Telemetry sources: the Prometheus collector (node-exporter, dcgm-exporter) behind
:class:`~kubesage.core.perception.Collector`, the metric map, per-node features and
their PCA, and the DCGM replay exporter the tests scrape.

The Kubernetes collector lives with the Kubernetes layer
(:mod:`kubesage.core.k8s.collector`); nothing here imports ``core.k8s``.
"""
