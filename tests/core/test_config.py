"""Strict YAML config loading (``parse_config``/``load_config``) and ``parse_seeds``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubesage.core.config import API_VERSION, load_config, parse_config
from kubesage.core.errors import ConfigError, InputError
from kubesage.core.policy.registry import DEFAULT_POLICIES
from kubesage.core.sim.settings import (
    SIMULATION_KIND,
    SimulationSettings,
    parse_seeds,
)

REPO = Path(__file__).resolve().parents[2]
SIMULATE_YAML = REPO / "configs" / "simulate.yaml"


def load(path: Path) -> SimulationSettings:
    return load_config(path, SimulationSettings, kind=SIMULATION_KIND)


def document(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": SIMULATION_KIND, "spec": spec}


# --------------------------------------------------------------------------- the shipped file


def test_simulate_yaml_equals_the_built_in_defaults() -> None:
    settings = load(SIMULATE_YAML)
    assert settings == SimulationSettings()
    assert settings.policies == DEFAULT_POLICIES
    assert settings.seeds == tuple(range(42, 52))


def test_simulate_yaml_spells_out_every_setting() -> None:
    spec = yaml.safe_load(SIMULATE_YAML.read_text(encoding="utf-8"))["spec"]
    assert set(spec) == set(SimulationSettings.model_fields)
    assert set(spec["cluster"]["synthetic"]) == {"nodes", "seed"}
    assert set(spec["workload"]["synthetic"]) == {"pods", "seed", "gpu_constraint_fraction"}


def test_parse_config_minimal_document_gives_defaults() -> None:
    for doc in (document(), {"apiVersion": API_VERSION, "kind": SIMULATION_KIND}):
        assert parse_config(doc, SimulationSettings, kind=SIMULATION_KIND) == SimulationSettings()


def test_parse_config_applies_values() -> None:
    doc = document(
        cluster={"synthetic": {"nodes": 10, "seed": 3}},
        workload={"pods_csv": "pods.csv", "synthetic": {"gpu_constraint_fraction": 0.25}},
        policies=["fgd", "bestfit"],
        seeds=[1, 2],
        tune=1.0,
        mode="replay",
        jobs=2,
    )
    doc["metadata"] = {"name": "small"}
    settings = parse_config(doc, SimulationSettings, kind=SIMULATION_KIND)
    assert settings.cluster.synthetic.nodes == 10
    assert settings.cluster.synthetic.seed == 3
    assert settings.workload.pods_csv == Path("pods.csv")
    assert settings.workload.synthetic.gpu_constraint_fraction == 0.25
    assert settings.workload.synthetic.pods == 8152  # untouched default
    assert settings.policies == ("fgd", "bestfit")
    assert settings.seeds == (1, 2)
    assert (settings.tune, settings.mode, settings.jobs) == (1.0, "replay", 2)


# --------------------------------------------------------------------------- bad documents


def with_spec_change(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load(SIMULATE_YAML.read_text(encoding="utf-8")))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


# (document, field, text in the message)
BAD_DOCUMENTS = [
    pytest.param(
        with_spec_change(("extra",), 1), "extra", "unknown key 'extra'", id="unknown-top-level"
    ),
    pytest.param(
        with_spec_change(("spec", "cluster", "synthetic", "bogus"), 1),
        "spec.cluster.synthetic.bogus",
        "unknown key",
        id="unknown-nested",
    ),
    pytest.param(
        with_spec_change(("spec", "bogus"), 1), "spec.bogus", "unknown key", id="unknown-in-spec"
    ),
    pytest.param(
        with_spec_change(("apiVersion",), "kubesage.io/v1"),
        "apiVersion",
        "apiVersion must be 'kubesage.io/v1alpha1', got 'kubesage.io/v1'",
        id="wrong-api-version",
    ),
    pytest.param(
        {"kind": SIMULATION_KIND, "spec": {}},
        "apiVersion",
        "got None",
        id="missing-api-version",
    ),
    pytest.param(
        with_spec_change(("kind",), "Simulations"),
        "kind",
        "kind must be 'Simulation', got 'Simulations'",
        id="wrong-kind",
    ),
    pytest.param(
        with_spec_change(("spec", "cluster", "synthetic", "nodes"), 0),
        "spec.cluster.synthetic.nodes",
        "greater than 0",
        id="zero-nodes",
    ),
    pytest.param(
        with_spec_change(("spec", "workload", "synthetic", "pods"), "many"),
        "spec.workload.synthetic.pods",
        "valid integer",
        id="pods-not-a-number",
    ),
    pytest.param(
        with_spec_change(("spec", "workload", "synthetic", "gpu_constraint_fraction"), 1.5),
        "spec.workload.synthetic.gpu_constraint_fraction",
        "less than or equal to 1",
        id="fraction-above-one",
    ),
    pytest.param(
        with_spec_change(("spec", "policies"), ["fgd", "nope"]),
        "spec.policies",
        "unknown policy 'nope'; known: random, dotprod",
        id="unknown-policy",
    ),
    pytest.param(
        with_spec_change(("spec", "policies"), []),
        "spec.policies",
        "at least one policy is needed",
        id="no-policies",
    ),
    pytest.param(
        with_spec_change(("spec", "seeds"), []),
        "spec.seeds",
        "at least one seed is needed",
        id="no-seeds",
    ),
    pytest.param(
        with_spec_change(("spec", "tune"), -0.5),
        "spec.tune",
        "greater than or equal to 0",
        id="negative-tune",
    ),
    pytest.param(
        with_spec_change(("spec", "tune"), float("inf")), "spec.tune", "finite", id="inf-tune"
    ),
    pytest.param(
        with_spec_change(("spec", "tune"), 1000.0),
        "spec.tune",
        "less than or equal to 100",
        id="huge-tune",
    ),
    pytest.param(
        with_spec_change(("spec", "mode"), "live"), "spec.mode", "'fgd' or 'replay'", id="mode"
    ),
    pytest.param(
        with_spec_change(("spec", "jobs"), 0),
        "spec.jobs",
        "greater than or equal to 1",
        id="zero-jobs",
    ),
    pytest.param(
        with_spec_change(("spec",), [1, 2]), "spec", "valid dictionary", id="spec-not-a-mapping"
    ),
]


@pytest.mark.parametrize(("doc", "field", "message"), BAD_DOCUMENTS)
def test_bad_document_names_file_and_field(
    tmp_path: Path, doc: dict[str, Any], field: str, message: str
) -> None:
    path = tmp_path / "simulate.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load(path)
    exc = info.value
    assert exc.field == field
    assert Path(exc.path) == path
    text = str(exc)
    assert text.startswith(f"{path}: field '{field}': ")
    assert message in text
    assert "Value error" not in text


def test_parse_config_names_its_source() -> None:
    doc = with_spec_change(("spec", "cluster", "synthetic", "bogus"), 1)
    with pytest.raises(ConfigError) as info:
        parse_config(doc, SimulationSettings, kind=SIMULATION_KIND)
    assert str(info.value) == "<config>: field 'spec.cluster.synthetic.bogus': unknown key"
    with pytest.raises(ConfigError, match=r"^command line: field 'spec\.cluster"):
        parse_config(doc, SimulationSettings, kind=SIMULATION_KIND, source="command line")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("spec: [unclosed\n", "not valid YAML", id="invalid-yaml"),
        pytest.param("apiVersion: a\n  kind: : b\n", "not valid YAML", id="bad-indent"),
        pytest.param("- a\n- b\n", "expected a mapping at the top level", id="list"),
        pytest.param("42\n", "expected a mapping at the top level", id="scalar"),
        pytest.param("", "expected a mapping at the top level", id="empty-file"),
    ],
)
def test_unreadable_documents(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "simulate.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.field is None
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_a_file_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "simulate.yaml"
    text = yaml.safe_dump(with_spec_change(("spec", "tune"), 1.3))
    path.write_bytes(text.encode() + "# café\n".encode("latin-1"))
    line = text.count("\n") + 1
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value) == (f"{path}: line {line}: not UTF-8 text (byte 0xe9; save it as UTF-8)")


def test_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read: Is a directory"):
        load(tmp_path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match="cannot read") as info:
        load(path)
    assert str(info.value).startswith(f"{path}: ")


def test_unknown_keys_of_mixed_types(tmp_path: Path) -> None:
    path = tmp_path / "simulate.yaml"
    path.write_text(
        f"apiVersion: {API_VERSION}\nkind: {SIMULATION_KIND}\n1: one\nextra: two\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="unknown key"):
        load(path)


@pytest.mark.parametrize(
    "path",
    [("spec", "seeds"), ("spec", "cluster", "synthetic", "seed")],
    ids=["seeds", "synthetic-seed"],
)
def test_negative_seeds_are_rejected(path: tuple[str, ...]) -> None:
    value: Any = [-1] if path[-1] == "seeds" else -1
    with pytest.raises(ConfigError):
        parse_config(with_spec_change(path, value), SimulationSettings, kind=SIMULATION_KIND)


# --------------------------------------------------------------------------- parse_seeds


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("42-51", tuple(range(42, 52))),
        ("1,5,9", (1, 5, 9)),
        ("1-3,10", (1, 2, 3, 10)),
        ("7", (7,)),
        ("5-5", (5,)),
        (" 1 , 2 ", (1, 2)),
        ("3,1,3", (3, 1)),  # order kept, repeats dropped
        ("1-3,2-4", (1, 2, 3, 4)),
        ("1,,2,", (1, 2)),  # empty parts are skipped
        ("0", (0,)),
    ],
)
def test_parse_seeds(text: str, seeds: tuple[int, ...]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4x", "'4x' is not N or N-M"),
        ("5-1", "seed range '5-1' runs backwards"),
        ("42-510000000", "seed range '42-510000000' holds 509999959 seeds; at most 10000"),
        ("", "no seeds in ''"),
        (",", "no seeds in ','"),
        (" , ", "no seeds"),
        ("1-", "'1-' is not N or N-M"),
        ("a-b", "'a-b' is not N or N-M"),
        ("1.5", "'1.5' is not N or N-M"),
        ("1-2-3", "'1-2-3' is not N or N-M"),
        ("1,x", "cannot read seeds from '1,x': 'x'"),
    ],
)
def test_parse_seeds_rejects(text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_seeds(text)
    assert message in str(info.value)


def test_a_key_written_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    # PyYAML alone keeps the last value: the first tune would be lost without a word.
    path = tmp_path / "simulate.yaml"
    path.write_text(
        f"apiVersion: {API_VERSION}\nkind: {SIMULATION_KIND}\nspec:\n  tune: 1.3\n  tune: 1.5\n"
    )
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value) == (
        f"{path}: not valid YAML at line 5, column 3: key 'tune' appears twice (first at line 4)"
    )


def test_yaml_merge_keys_still_merge(tmp_path: Path) -> None:
    path = tmp_path / "simulate.yaml"
    path.write_text(
        f"apiVersion: {API_VERSION}\nkind: {SIMULATION_KIND}\n"
        "spec:\n  <<: {tune: 1.2, seeds: [1]}\n  tune: 1.4\n"  # an explicit key wins
    )
    settings = load(path)
    assert (settings.tune, settings.seeds) == (1.4, (1,))
