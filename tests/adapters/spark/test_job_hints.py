"""Input locality as the command line and the executors' annotation give it."""

from __future__ import annotations

import pytest

from kubesage.adapters.spark.job_hints import parse_locality
from kubesage.core.errors import InputError


def test_items_parse_to_fractions_by_name() -> None:
    assert parse_locality("rack-a1=0.6, zone-b=0.2,") == {"rack-a1": 0.6, "zone-b": 0.2}
    assert parse_locality(None) == {}


def test_a_name_given_twice_is_refused_not_overwritten() -> None:
    with pytest.raises(InputError, match=r"--input-locality names 'rack-a1' twice \(0.5 and 0.6\)"):
        parse_locality("rack-a1=0.5,rack-a1=0.6")
    with pytest.raises(InputError, match=r"^kubesage.io/spark-input-locality item 'x' is not"):
        parse_locality("x", source="kubesage.io/spark-input-locality")
