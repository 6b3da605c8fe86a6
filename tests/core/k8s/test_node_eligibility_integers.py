"""``Gt``/``Lt`` in required node affinity read integers as Kubernetes does (Go's
``strconv.ParseInt(s, 10, 64)``), not as Python's ``int``."""

from __future__ import annotations

import pytest

from kubesage.core.k8s.node_eligibility import expression_matches, go_parse_int, node_fits_pod


def gt(value: str) -> dict[str, object]:
    return {"key": "gen", "operator": "Gt", "values": [value]}


@pytest.mark.parametrize(
    ("label", "bound"),
    [
        ("1_0", "9"),  # Python reads 10; ParseInt with base 10 takes no underscore
        (" 17", "9"),
        ("17\n", "9"),
        ("١٧", "9"),  # Arabic-Indic digits: Python reads 17
        ("9223372036854775808", "9"),  # past int64: ParseInt's range error
        ("17", "1_0"),  # the requirement's value is read the same way
        ("17", " 9"),
    ],
)
def test_what_go_does_not_parse_matches_nothing(label: str, bound: str) -> None:
    assert expression_matches(gt(bound), {"gen": label}) is False
    pod = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [gt(bound)]}]
                    }
                }
            }
        }
    }
    assert node_fits_pod(pod, {"metadata": {"name": "n", "labels": {"gen": label}}}) is False


def test_go_parse_int() -> None:
    assert go_parse_int("17") == 17
    assert go_parse_int("+17") == 17
    assert go_parse_int("-17") == -17
    assert go_parse_int("007") == 7
    assert go_parse_int("9223372036854775807") == 2**63 - 1
    assert go_parse_int("-9223372036854775808") == -(2**63)
    for text in ("", "+", "-", "1_0", " 7", "7 ", "7\n", "0x10", "1e3", "١٧", "--1"):
        assert go_parse_int(text) is None, text
    assert expression_matches(gt("-1"), {"gen": "0"}) is True
    assert expression_matches({"key": "gen", "operator": "Lt", "values": ["+5"]}, {"gen": "-3"})
