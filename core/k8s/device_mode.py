"""Which form a cluster hands out GPUs in: DRA claims when it serves ``resource.k8s.io/v1``,
else the device plugin's extended resources.

The commands that write GPU requests (``kubesage gpu launch``, ``kubesage spark conf``,
``kubesage flink submit``) take ``--devices dra|device-plugin``; without it they ask the
cluster of an explicit ``--kubeconfig`` (discovery, one request), and with neither they
keep the device plugin's form, which every GPU cluster of today understands. Only an
explicit kubeconfig is asked: what a dry run prints must not change with the
environment it happens to run in.
"""

from __future__ import annotations

from pathlib import Path

from kubesage.core.dra.api import API_VERSION
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import DependencyError


def detect_device_mode(
    devices: DeviceMode | None, kubeconfig: Path | None, context: str | None = None
) -> tuple[DeviceMode, str]:
    """The device mode to write and why: ``devices`` when given, else the cluster's.

    Raises ConfigError for an unreadable kubeconfig and DependencyError when the cluster
    cannot be asked (the message says to pass ``--devices``).
    """
    if devices is not None:
        return devices, f"--devices {devices.value}"
    if kubeconfig is None:
        return DeviceMode.device_plugin, "no --kubeconfig to ask: the device plugin's form"
    # Imported on use: the kubernetes client is slow to import and most runs ask no cluster.
    import urllib3

    from kubesage.core.k8s.apiclient import ApiException, load_api_client, serves_api_version

    api = load_api_client(str(kubeconfig), context)
    if api is None:  # an explicit kubeconfig loads or raises: not reached
        return DeviceMode.device_plugin, "no cluster configured: the device plugin's form"
    try:
        served = serves_api_version(api, API_VERSION)
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise DependencyError(
            f"cannot ask the cluster whether it serves {API_VERSION} ({exc}); "
            "pass --devices dra or --devices device-plugin"
        ) from exc
    finally:
        api.close()  # type: ignore[no-untyped-call]
    if served:
        return DeviceMode.dra, f"the cluster serves {API_VERSION}: DRA claims"
    return DeviceMode.device_plugin, f"the cluster does not serve {API_VERSION}: the device plugin"
