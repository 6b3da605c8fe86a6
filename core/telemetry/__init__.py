"""Perception: collectors (Kubernetes API, Prometheus) behind one protocol; per-node
features and their PCA."""
