"""Where kubesage finds the Kubernetes API: a kubeconfig, ``KUBECONFIG``, or the pod's
service account.

The order is kubectl's: an explicit kubeconfig path, then ``$KUBECONFIG`` (the first
existing file of a ``:``-separated list), then ``~/.kube/config``, then the in-cluster
service account. With none of them, :func:`load_api_client` returns ``None`` and the
caller runs without a cluster (``kubesage serve`` then uses its embedded simulated
cluster). A configuration that exists but cannot be read is an error, not a silent
fallback: a typo in a kubeconfig must not turn a live scheduler into a simulator.

This module is also the one place that imports the ``kubernetes`` client package (an
import-linter contract holds every other module to it): the rest of kubesage takes the
API classes and :class:`ApiException` from here, so a client upgrade or a switch of
client touches one file.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml
from kubernetes import config as k8s_config
from kubernetes.client import (
    ApiClient,
    ApisApi,
    BatchV1Api,
    Configuration,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
    ResourceV1Api,  # resource.k8s.io/v1 (DRA): ResourceSlices, claims
    V1Binding,
    V1DeleteOptions,
    V1Eviction,
    V1ObjectMeta,
    V1ObjectReference,
    V1Preconditions,
)
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from kubesage.core.errors import ConfigError

__all__ = [
    "SERVICE_HOST_ENV",
    "ApiClient",
    "ApiException",
    "BatchV1Api",
    "CoordinationV1Api",
    "CoreV1Api",
    "CustomObjectsApi",
    "PolicyV1Api",
    "ResourceV1Api",
    "V1Binding",
    "V1DeleteOptions",
    "V1Eviction",
    "V1ObjectMeta",
    "V1ObjectReference",
    "V1Preconditions",
    "kubeconfig_candidates",
    "load_api_client",
    "serves_api_version",
]

log = logging.getLogger(__name__)

SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
"""Set by the kubelet in every pod; its presence means "running in a cluster"."""


def kubeconfig_candidates(kubeconfig: str | None = None) -> list[Path]:
    """Kubeconfig files in the order they are tried (existing or not)."""
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    listed = os.environ.get("KUBECONFIG", "")
    paths = [Path(part).expanduser() for part in listed.split(os.pathsep) if part]
    return [*paths, Path("~/.kube/config").expanduser()]


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient | None:
    """An ApiClient for the configured cluster, or ``None`` when nothing is configured.

    Raises ConfigError when ``kubeconfig`` is given but missing, or when a kubeconfig
    or the in-cluster configuration exists but cannot be loaded.
    """
    if kubeconfig and not Path(kubeconfig).expanduser().is_file():
        raise ConfigError("kubeconfig file does not exist", path=kubeconfig)
    for path in kubeconfig_candidates(kubeconfig):
        if not path.is_file():
            continue
        configuration = Configuration()
        try:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(path),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except (ConfigException, yaml.YAMLError, ValueError, OSError, TypeError, KeyError) as exc:
            raise ConfigError(f"cannot load kubeconfig: {exc}", path=path) from exc
        log.info("using kubeconfig %s (context %s)", path, context or "current")
        return ApiClient(configuration)
    if os.environ.get(SERVICE_HOST_ENV):
        configuration = Configuration()
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except ConfigException as exc:
            raise ConfigError(f"cannot load the in-cluster configuration: {exc}") from exc
        log.info("using the in-cluster service account")
        return ApiClient(configuration)
    log.info("no kubeconfig and not in a cluster: no Kubernetes API")
    return None


def serves_api_version(api: ApiClient, api_version: str) -> bool:
    """Whether the API server serves ``api_version`` (``group/version``), by discovery.

    Raises ApiException when discovery itself fails (other than by not finding it).
    """
    group, _, version = api_version.partition("/")
    try:
        groups = ApisApi(api).get_api_versions()
    except ApiException as exc:
        if exc.status == 404:  # no named groups at all
            return False
        raise
    return any(
        served.name == group and any(v.version == version for v in served.versions or ())
        for served in groups.groups or ()
    )
