"""Every test lands in exactly one tier, by its folder when it names none (tests/support/tiers.py)."""

from __future__ import annotations

import pytest

from tests.support.tiers import TESTS, TIER_OF_PATH, TIERS, tier_of


def test_every_path_of_the_tier_table_exists():
    missing = [prefix for prefix, _ in TIER_OF_PATH if not (TESTS / prefix).exists()]
    assert not missing, f"tier table names paths that are gone: {missing}"
    assert {tier for _, tier in TIER_OF_PATH} <= set(TIERS)


@pytest.mark.parametrize(
    ("path", "tier"),
    [
        ("server/kserve/test_grpc.py", "integration"),
        ("server/kserve/test_a_new_module.py", "integration"),  # a new test lands in its folder's tier
        ("server/test_config.py", "unit"),
        ("server/test_a_new_module.py", "unit"),
        ("reliability/test_soak.py", "soak"),
        ("reliability/test_fuzz.py", "integration"),
        ("docker/test_compose_stack.py", "docker"),
        ("docker/test_static.py", "unit"),
        ("server/test_cuda.py", "gpu"),
    ],
)
def test_a_test_module_gets_the_tier_of_its_folder(path, tier):
    assert tier_of(TESTS / path) == tier


def test_this_test_carries_exactly_one_tier_marker(request):
    assert [tier for tier in TIERS if request.node.get_closest_marker(tier)] == ["unit"]


@pytest.mark.integration
def test_a_tier_the_test_names_wins_over_its_folder(request):
    assert [tier for tier in TIERS if request.node.get_closest_marker(tier)] == ["integration"]
