"""MIG catalogues against the published placement tables, and layout rules."""

from __future__ import annotations

import pytest

from kubesage.adapters.gpu_training.mig import (
    CATALOGUES,
    MigInstance,
    catalogue,
    is_valid_layout,
    layout_errors,
    mig_parted_config,
    valid_layouts,
)
from kubesage.core.errors import InputError
from kubesage.core.k8s.translate import mig_shape
from kubesage.core.topology.discovery import gpu_model_from_product

# Published placements (nvidia-smi mig -lgipp; MIG User Guide), written out per GPU
# independently of the module's shape table: profile -> (profile ID, starts, size).
H100_80GB = {
    "1g.10gb": (19, [0, 1, 2, 3, 4, 5, 6], 1),
    "1g.10gb+me": (20, [0, 1, 2, 3, 4, 5, 6], 1),
    "1g.20gb": (15, [0, 2, 4, 6], 2),
    "2g.20gb": (14, [0, 2, 4], 2),
    "3g.40gb": (9, [0, 4], 4),
    "4g.40gb": (5, [0], 4),
    "7g.80gb": (0, [0], 8),
}
A100_40GB = {
    "1g.5gb": (19, [0, 1, 2, 3, 4, 5, 6], 1),
    "1g.5gb+me": (20, [0, 1, 2, 3, 4, 5, 6], 1),
    "1g.10gb": (15, [0, 2, 4, 6], 2),
    "2g.10gb": (14, [0, 2, 4], 2),
    "3g.20gb": (9, [0, 4], 4),
    "4g.20gb": (5, [0], 4),
    "7g.40gb": (0, [0], 8),
}
H200_141GB_NAMES = ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
PUBLISHED = {
    "H100-80GB": H100_80GB,
    "A100-80GB": H100_80GB,
    "A100-40GB": A100_40GB,
    "H200-141GB": dict(zip(H200_141GB_NAMES, H100_80GB.values(), strict=True)),
}


@pytest.mark.parametrize(
    ("model", "profile", "start"),
    [
        (model, profile, start)
        for model, table in PUBLISHED.items()
        for profile in table
        for start in range(8)
    ],
)
def test_single_instance_starts_match_the_published_table(
    model: str, profile: str, start: int
) -> None:
    profile_id, starts, size = PUBLISHED[model][profile]
    entry = catalogue(model).profile(profile)
    assert (entry.profile_id, list(entry.starts), entry.memory_slices) == (profile_id, starts, size)
    assert is_valid_layout(model, [MigInstance(profile, start)]) == (start in starts)


@pytest.mark.parametrize(
    "layout",
    [
        [("7g.80gb", 0)],
        [("4g.40gb", 0), ("3g.40gb", 4)],
        [("3g.40gb", 0), ("3g.40gb", 4)],
        [("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)],
        [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)],
        [("1g.20gb", 0), ("1g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6)],
        [("1g.10gb", s) for s in range(7)],
        [("1g.10gb+me", 0)] + [("1g.10gb", s) for s in range(1, 7)],
        [("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6)],
    ],
)
def test_known_valid_h100_layouts(layout: list[tuple[str, int]]) -> None:
    assert layout_errors("H100-80GB", [MigInstance(p, s) for p, s in layout]) == []


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ([("4g.40gb", 0), ("4g.40gb", 0)], "overlaps"),
        ([("3g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 6)], "overlaps"),
        ([("1g.10gb", 7)], "cannot start at memory slice 7"),
        ([("1g.10gb+me", 0), ("1g.10gb+me", 1)], "at most 1 per GPU"),
        ([("4g.40gb", 0), ("2g.20gb", 4), ("1g.20gb", 6)], None),  # 7 compute, fits
        ([("7g.80gb", 0), ("1g.10gb", 0)], "overlaps"),
        ([("2g.20gb", 1)], "cannot start"),
    ],
)
def test_invalid_layouts_name_the_rule(layout: list[tuple[str, int]], message: str | None) -> None:
    errors = layout_errors("H100-80GB", [MigInstance(p, s) for p, s in layout])
    if message is None:
        assert errors == []
    else:
        assert any(message in error for error in errors), errors


@pytest.mark.parametrize("model", list(CATALOGUES))
def test_enumerated_layouts_are_valid_distinct_and_complete(model: str) -> None:
    cat = catalogue(model)
    layouts = list(valid_layouts(model))
    assert len(set(layouts)) == len(layouts)
    candidates = [MigInstance(p.name, s) for p in cat.profiles for s in range(8)]
    seen = set(layouts)
    for layout in layouts:
        slices = [
            s
            for i in layout
            for s in range(i.start, i.start + cat.profile(i.profile).memory_slices)
        ]
        assert len(slices) == len(set(slices)) and max(slices, default=0) < 8
        assert sum(cat.profile(i.profile).compute_slices for i in layout) <= 7
        # Completeness: any valid one-instance extension is itself enumerated.
        for extra in candidates:
            bigger = tuple(sorted((*layout, extra), key=lambda i: (i.start, i.profile)))
            if is_valid_layout(model, bigger):
                assert bigger in seen
    full = [layout for layout in layouts if layout and layout[0].profile.startswith("7g")]
    assert full == [(MigInstance(cat.profiles[-1].name, 0),)]


def test_mig_parted_config_and_resource_names() -> None:
    layout = [MigInstance("3g.40gb", 0), MigInstance("2g.20gb", 4), MigInstance("1g.10gb", 6)]
    config = mig_parted_config("balanced", "H100-80GB", layout)
    assert config == {
        "version": "v1",
        "mig-configs": {
            "balanced": [
                {
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1},
                }
            ]
        },
    }
    assert catalogue("H100-80GB").profile("3g.40gb").resource_name == "nvidia.com/mig-3g.40gb"
    with pytest.raises(InputError, match="overlaps"):
        mig_parted_config(
            "bad", "H100-80GB", [MigInstance("7g.80gb", 0), MigInstance("1g.10gb", 3)]
        )


def test_unknown_models_and_profiles_are_named() -> None:
    with pytest.raises(InputError, match=r"no MIG catalogue for GPU model 'V100'"):
        catalogue("V100")
    with pytest.raises(InputError, match=r"A100-40GB has no MIG profile '1g\.10gb\+me'"):
        catalogue("A100-40GB").profile("1g.10gb+me")


@pytest.mark.parametrize(
    ("product", "names"),
    [
        ("NVIDIA GH200 480GB", ("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")),
        ("NVIDIA H100 NVL", ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")),
        ("NVIDIA H100 PCIe", ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    ],
)
def test_hopper_variants_get_their_own_profile_names(product: str, names: tuple[str, ...]) -> None:
    cat = catalogue(gpu_model_from_product(product))
    assert tuple(p.name for p in cat.profiles if "+me" not in p.name) == names
    for name in names:  # the core's geometry of each name agrees with the catalogue
        core, ours = mig_shape(name), cat.profile(name)
        assert (core.memory_slices, core.starts) == (ours.memory_slices, ours.starts), name
