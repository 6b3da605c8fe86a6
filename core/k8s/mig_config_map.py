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
  (nodes that take MIG layouts through DRA need none: their label step is skipped);
- the ``config.yaml`` key is written back as YAML that PyYAML dumps: its values are
  kept, its comments and formatting are not.

Known limit: a ConfigMap mounted into a pod reaches the pod's files after the
kubelet's sync (up to about a minute), and the label is set right after a new config
is published. MIG Manager may then read the old file, report
``nvidia.com/mig.config.state=failed`` and wait for the label to change; kubesage
does not yet relabel such a node by itself, and says so in the step's result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
import yaml

from kubesage.core.errors import KubesageError
from kubesage.core.k8s.apiclient import ApiClient, ApiException, CoreV1Api
from kubesage.core.k8s.mig_manager import CONFIG_KEY, MIG_CONFIG_LABEL, OWN_PREFIX
from kubesage.core.k8s.v1_models import namespaced_name


@dataclass(frozen=True)
class MigConfigMap:
    """Where MIG Manager reads its mig-parted configs: a ConfigMap by namespace and name."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str, what: str = "--mig-config-map") -> MigConfigMap:
        """``NAMESPACE/NAME``; InputError naming ``what`` if it is not one."""
        return cls(*namespaced_name(text, what, "ConfigMap"))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class MigConfigError(KubesageError):
    """A mig-parted config that could not be published; names the ConfigMap and why."""


class MigConfigPublisher:
    """Merges mig-parted configs into a :class:`MigConfigMap` (see the module docstring)."""

    def __init__(
        self, api: ApiClient, config_map: MigConfigMap, *, request_timeout_s: float
    ) -> None:
        # Any: called with _preload_content=False (JSON read off the response).
        self._core: Any = CoreV1Api(api)
        self.config_map = config_map
        self.request_timeout_s = request_timeout_s

    def publish(self, mig_parted: Mapping[str, Any]) -> tuple[str, ...]:
        """Merge ``mig_parted``'s ``mig-configs`` into the ConfigMap; the names it added
        (empty: all were there already). :class:`MigConfigError` says why it could not
        (the label step then fails)."""
        wanted = mig_parted.get("mig-configs")
        if not isinstance(wanted, Mapping) or not wanted:
            raise MigConfigError("the plan carries no mig-parted configs to publish")
        where = f"ConfigMap {self.config_map}"
        try:
            current = self._read()
            document = _configs_of(current, where)
            in_use = self._labelled_configs()
        except ApiException as exc:
            if exc.status == 404:
                raise MigConfigError(
                    f"{where} does not exist: create it (key {CONFIG_KEY}, your own layouts "
                    "in it) and point the GPU Operator's ClusterPolicy "
                    "spec.migManager.config.name at it"
                ) from None
            raise MigConfigError(f"reading {where} failed (HTTP {exc.status})") from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise MigConfigError(f"reading {where} failed: {exc}") from None
        configs: dict[Any, Any] = document["mig-configs"]
        added = tuple(name for name in wanted if name not in configs)
        changed = False
        for name, config in wanted.items():
            if configs.get(name) != config:
                configs[name] = config
                changed = True
        for name in [n for n in configs if isinstance(n, str) and n.startswith(OWN_PREFIX)]:
            if name not in wanted and name not in in_use:
                del configs[name]
                changed = True
        if not changed:
            return added
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
                raise MigConfigError(
                    f"{where} changed while it was updated; retried on a later tick"
                ) from None
            raise MigConfigError(f"writing {where} failed (HTTP {exc.status})") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise MigConfigError(f"writing {where} failed: {exc}") from None
        return added

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
