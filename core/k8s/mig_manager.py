"""The names the GPU Operator's MIG Manager reads, written once for the core and the GPU
adapter: the node label naming a node's mig-parted config, the ConfigMap key the
configs are in, and the prefix of the configs kubesage names (and may prune)."""

from __future__ import annotations

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
"""The node label MIG Manager watches: the name of the mig-parted config to apply."""
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
"""MIG Manager's report on the last config it applied: ``success``, ``failed``, …"""
CONFIG_KEY = "config.yaml"
"""The ConfigMap key MIG Manager reads its mig-parted configs from."""
OWN_PREFIX = "kubesage-"
"""The prefix of the mig-parted configs kubesage names (and may remove)."""


def own_config_name(digest: str) -> str:
    """The name of kubesage's mig-parted config for a layout of this digest."""
    return f"{OWN_PREFIX}{digest}"
