"""--devices: given, asked of an explicit kubeconfig's cluster by discovery, or the default."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import ConfigError, DependencyError
from kubesage.core.k8s.device_mode import detect_device_mode
from tests.fakes.apiserver import FakeApiServer


@pytest.mark.parametrize("dra", [True, False])
def test_the_cluster_of_a_kubeconfig_is_asked(dra: bool) -> None:
    with FakeApiServer(dra=dra) as fake:
        mode, why = detect_device_mode(None, fake.kubeconfig)
    assert mode is (DeviceMode.dra if dra else DeviceMode.device_plugin)
    assert "resource.k8s.io/v1" in why


def test_an_explicit_mode_or_no_kubeconfig_asks_nothing() -> None:
    assert detect_device_mode(DeviceMode.dra, None)[0] is DeviceMode.dra
    assert detect_device_mode(DeviceMode.device_plugin, Path("unread"))[0] is (
        DeviceMode.device_plugin
    )
    assert detect_device_mode(None, None)[0] is DeviceMode.device_plugin


def test_a_failing_discovery_says_to_pass_devices() -> None:
    with FakeApiServer() as fake:
        fake.fail("GET", "^/apis/?$", 403, message="forbidden")
        with pytest.raises(DependencyError, match="pass --devices"):
            detect_device_mode(None, fake.kubeconfig)


def test_a_missing_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        detect_device_mode(None, tmp_path / "nope")
