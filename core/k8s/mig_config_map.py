"""Publishing kubesage's MIG layouts where the GPU Operator's MIG Manager reads them.

MIG Manager applies the mig-parted config that a node's ``nvidia.com/mig.config``
label names, looked up in the ConfigMap the GPU Operator's ClusterPolicy names
(``spec.migManager.config.name``, key ``config.yaml``). A re-layout kubesage plans is
named ``kubesage-<digest>`` (``adapters/gpu_training/relayout.py``), which no stock
config holds, so the label alone would leave MIG Manager with a name it cannot find.
With ``kubesage serve --mig-config-map NAMESPACE/NAME`` the node labeller first merges
the plan's config into that ConfigMap, then sets the label
(:class:`~kubesage.core.k8s.actuators.LiveNodeLabeler`):

- kubesage adds and removes only entries named ``kubesage-…``; every other entry (the
  stock layouts the cluster also uses — seed the ConfigMap with them) stays as it is;
- an entry named ``kubesage-…`` that no node's label names any more is removed when the
  next one is published, so the ConfigMap does not grow without bound;
- the write is a replace at the resourceVersion read (a concurrent change is a 409:
  the step fails and the loop retries it on a later tick, nothing overwritten);
- no ConfigMap named, or one that does not exist, fails the step with what to do
  (nodes that take MIG layouts through DRA need none: their label step is skipped).

A ConfigMap mounted into a pod reaches the pod's files after the kubelet's sync
period (up to about a minute); if MIG Manager reports ``nvidia.com/mig.config.state=
failed`` for a label set right after a publication, relabelling the node applies it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
import yaml

from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import ApiClient, ApiException, CoreV1Api

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
"""The node label MIG Manager watches: the name of the mig-parted config to apply."""
CONFIG_KEY = "config.yaml"
"""The ConfigMap key MIG Manager reads its mig-parted configs from."""
OWN_PREFIX = "kubesage-"
"""The prefix of the configs kubesage publishes (and may remove)."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class MigConfigMap:
    """Where MIG Manager reads its mig-parted configs: a ConfigMap by namespace and name."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str, what: str = "--mig-config-map") -> MigConfigMap:
        """``NAMESPACE/NAME``; InputError naming ``what`` if it is not one."""
        namespace, slash, name = text.partition("/")
        if not slash or not namespace or not name:
            raise InputError(f"{what} {text!r}: expected NAMESPACE/NAME of a ConfigMap")
        if len(namespace) > 63 or not _DNS_LABEL.match(namespace):
            raise InputError(f"{what} {text!r}: namespace {namespace!r} is not a DNS-1123 label")
        if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise InputError(f"{what} {text!r}: name {name!r} is not a DNS-1123 subdomain")
        return cls(namespace, name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class MigConfigPublisher:
    """Merges mig-parted configs into a :class:`MigConfigMap` (see the module docstring)."""

    def __init__(
        self, api: ApiClient, config_map: MigConfigMap, *, request_timeout_s: float
    ) -> None:
        # Any: called with _preload_content=False (JSON read off the response).
        self._core: Any = CoreV1Api(api)
        self.config_map = config_map
        self.request_timeout_s = request_timeout_s

    def publish(self, mig_parted: Mapping[str, Any]) -> str | None:
        """Merge ``mig_parted``'s ``mig-configs`` into the ConfigMap; None when done (or
        already there), else why not (the step then fails)."""
        wanted = mig_parted.get("mig-configs")
        if not isinstance(wanted, Mapping) or not wanted:
            return "the plan carries no mig-parted configs to publish"
        where = f"ConfigMap {self.config_map}"
        try:
            current = self._read()
            document = _configs_of(current, where)
            in_use = self._labelled_configs()
        except ApiException as exc:
            if exc.status == 404:
                return (
                    f"{where} does not exist: create it (key {CONFIG_KEY}, your own layouts "
                    "in it) and point the GPU Operator's ClusterPolicy "
                    "spec.migManager.config.name at it"
                )
            return f"reading {where} failed (HTTP {exc.status})"
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            return f"reading {where} failed: {exc}"
        configs: dict[str, Any] = document["mig-configs"]
        changed = False
        for name, config in wanted.items():
            if configs.get(name) != config:
                configs[name] = config
                changed = True
        for name in [n for n in configs if n.startswith(OWN_PREFIX)]:
            if name not in wanted and name not in in_use:
                del configs[name]
                changed = True
        if not changed:
            return None
        current["data"] = {
            **(current.get("data") or {}),
            CONFIG_KEY: yaml.safe_dump(document, sort_keys=False),
        }
        try:
            self._core.replace_namespaced_config_map(
                self.config_map.name,
                self.config_map.namespace,
                current,
                _preload_content=False,
                _request_timeout=self.request_timeout_s,
            ).read()
        except ApiException as exc:
            if exc.status == 409:
                return f"{where} changed while it was updated; retried on a later tick"
            return f"writing {where} failed (HTTP {exc.status})"
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return f"writing {where} failed: {exc}"
        return None

    def _read(self) -> dict[str, Any]:
        response = self._core.read_namespaced_config_map(
            self.config_map.name,
            self.config_map.namespace,
            _preload_content=False,
            _request_timeout=self.request_timeout_s,
        )
        config_map: dict[str, Any] = json.loads(response.data)
        return config_map

    def _labelled_configs(self) -> set[str]:
        """The config names nodes are labelled with now (their configs stay)."""
        response = self._core.list_node(
            label_selector=MIG_CONFIG_LABEL,
            _preload_content=False,
            _request_timeout=self.request_timeout_s,
        )
        nodes = json.loads(response.data).get("items") or []
        return {
            str(((node.get("metadata") or {}).get("labels") or {}).get(MIG_CONFIG_LABEL, ""))
            for node in nodes
        }


def _configs_of(config_map: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The mig-parted document in the ConfigMap (``version: v1`` with an empty
    ``mig-configs`` when the key is absent or empty); ValueError naming what is wrong."""
    text = (config_map.get("data") or {}).get(CONFIG_KEY) or ""
    try:
        document = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{where} key {CONFIG_KEY} is not YAML: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError(f"{where} key {CONFIG_KEY} is not a mapping")
    document.setdefault("version", "v1")
    configs = document.setdefault("mig-configs", {})
    if configs is None:
        configs = document["mig-configs"] = {}
    if not isinstance(configs, dict):
        raise ValueError(f"{where} key {CONFIG_KEY}: mig-configs is not a mapping")
    return document
