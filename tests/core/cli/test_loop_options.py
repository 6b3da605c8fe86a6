"""The control loop's option checks (``kubesage serve`` / ``kubesage loop``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesage.core.cli.loop_options import loop_settings
from kubesage.core.errors import InputError


def test_an_audit_log_that_is_a_directory_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        loop_settings(audit_log=tmp_path)
    assert str(info.value) == f"--audit-log {tmp_path}: cannot append to it: is a directory"


def test_an_audit_log_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^--audit-log .*: its folder does not exist$"):
        loop_settings(audit_log=tmp_path / "absent" / "audit.jsonl")


def test_an_audit_log_file_to_create_is_accepted(tmp_path: Path) -> None:
    settings = loop_settings(audit_log=tmp_path / "audit.jsonl")
    assert settings.audit_log == tmp_path / "audit.jsonl"
