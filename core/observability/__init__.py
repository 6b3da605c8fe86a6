"""kubesage's own signals: the Prometheus registry every component counts into, and
structured JSON logs.

Neutral ground: the Kubernetes layer, the telemetry collectors and the CLI all import
from here, and nothing here imports any of them (an import-linter contract keeps
``core.telemetry`` away from ``core.k8s``).

- ``metrics``: the one registry ``/metrics`` serves, and its counters;
- ``logging``: one JSON object per log line.
"""
