"""The live actuator of ``LabelNode``: a merge patch of a node's labels, and for a MIG
re-layout the mig-parted config its label names published first.

A MIG re-layout step (the ``nvidia.com/mig.config`` label alone):

- on a node publishing partitionable MIG devices it is not labelled: the plan's binds
  allocate the new layout's partitions with the pods' claims
  (:mod:`~kubesage.core.k8s.dra_allocation`), and MIG Manager must not re-partition GPUs
  the DRA driver manages;
- elsewhere, when the step carries its mig-parted config, that config is merged into the
  ConfigMap MIG Manager reads (:mod:`~kubesage.core.k8s.mig_config_map`) before the
  label is set; without a ConfigMap to publish in, the step fails saying so, since
  MIG Manager could not find the config the label would name. When the label changes,
  MIG Manager's report on the old config (``nvidia.com/mig.config.state``) is removed
  with it, so that the ``success`` the loop's binds wait for
  (:mod:`~kubesage.core.k8s.mig_readiness`) is MIG Manager's report on the new one; a
  node whose MIG Manager is still applying another config (``pending``, ``rebooting``)
  is not relabelled (refused: its report on that one would land after the removal).

Any other labels are patched as they are (a None value removes the label).
"""

from __future__ import annotations

from typing import Any

import urllib3

from kubesage.core.errors import KubesageError
from kubesage.core.k8s.api_reads import read_node
from kubesage.core.k8s.api_results import DEFAULT_REQUEST_TIMEOUT_S, api_result, unexpected
from kubesage.core.k8s.apiclient import ApiClient, ApiException, CoreV1Api
from kubesage.core.k8s.dra_binding import ClaimAllocator
from kubesage.core.k8s.mig_config_map import MigConfigError, MigConfigPublisher
from kubesage.core.k8s.mig_manager import MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from kubesage.core.k8s.mig_readiness import BUSY_STATES
from kubesage.core.k8s.workloads import MERGE_PATCH
from kubesage.core.loop.actions import Action, ActionKind, LabelNode
from kubesage.core.loop.reconciler import Outcome, Result


class LiveNodeLabeler:
    """LabelNode over the API (see the module docstring)."""

    def __init__(
        self,
        api: ApiClient,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        claims: ClaimAllocator | None = None,
        mig_configs: MigConfigPublisher | None = None,
    ) -> None:
        # Any: called with _preload_content=False (only the status code matters).
        self._core: Any = CoreV1Api(api)
        self.request_timeout_s = request_timeout_s
        self._claims = claims or ClaimAllocator(api, request_timeout_s=request_timeout_s)
        self._mig_configs = mig_configs

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.LABEL_NODE})

    def execute(self, action: Action) -> Result:
        if not isinstance(action, LabelNode):
            return unexpected(action)
        labels = dict(action.labels)
        published = ""
        if set(labels) == {MIG_CONFIG_LABEL}:
            try:
                through_dra = self._claims.inventory(action.node).partitionable
            except KubesageError as exc:
                return Result(Outcome.FAILED, f"reading {action.node}'s ResourceSlices: {exc}")
            if through_dra:
                return Result(
                    Outcome.DONE,
                    f"node/{action.node} publishes partitionable MIG devices: the new layout "
                    f"is allocated through DRA with the pods' claims, not labelled {labels}",
                )
            if labels[MIG_CONFIG_LABEL] is not None:
                try:
                    node = read_node(self._core, action.node, self.request_timeout_s) or {}
                except KubesageError as exc:
                    return Result(Outcome.FAILED, str(exc))
                current: dict[str, str] = (node.get("metadata") or {}).get("labels") or {}
                config, state = current.get(MIG_CONFIG_LABEL), current.get(MIG_CONFIG_STATE_LABEL)
                if config != labels[MIG_CONFIG_LABEL]:
                    if state in BUSY_STATES:
                        return Result(
                            Outcome.REFUSED,
                            f"node/{action.node}: MIG Manager is still applying config {config} "
                            f"({MIG_CONFIG_STATE_LABEL}={state}); relabelling now would race "
                            "it and its report",
                        )
                    labels[MIG_CONFIG_STATE_LABEL] = None  # the old config's report goes too
            if action.mig_parted is not None:
                try:
                    published = self._publish(action)
                except MigConfigError as exc:
                    return Result(Outcome.FAILED, f"node/{action.node} not labelled: {exc}")
        try:
            self._core.patch_node(
                action.node,
                {"metadata": {"labels": labels}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.request_timeout_s,
            ).read()
        except ApiException as exc:
            return api_result(exc, f"labelling node {action.node}")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return Result(
                Outcome.FAILED, f"labelling node {action.node}: API server unreachable: {exc}"
            )
        shown = ", ".join(
            f"{key}={value}" if value is not None else f"{key}-" for key, value in labels.items()
        )
        return Result(Outcome.DONE, f"node/{action.node} labelled {shown}{published}")

    def _publish(self, action: LabelNode) -> str:
        """The step's mig-parted config merged where MIG Manager reads it; what to add
        to the step's result (MigConfigError: it could not be)."""
        assert action.mig_parted is not None
        name = action.labels[MIG_CONFIG_LABEL]
        if self._mig_configs is None:
            raise MigConfigError(
                f"its MIG layout {name} is not in any mig-parted config MIG Manager reads: "
                "start kubesage with --mig-config-map NAMESPACE/NAME (the ConfigMap the GPU "
                "Operator's ClusterPolicy spec.migManager.config.name names) to publish it"
            )
        added = self._mig_configs.publish(action.mig_parted)
        if not added:
            return ""
        return (
            f"; published {', '.join(added)} to {self._mig_configs.config_map} just now: "
            "MIG Manager reads it once the kubelet refreshes its copy (up to a minute); if "
            f"the node reports {MIG_CONFIG_STATE_LABEL}=failed meanwhile, relabel it"
        )
