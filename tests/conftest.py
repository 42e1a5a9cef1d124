"""Shared fixtures (tiny configs: d_model 32, 2 layers; fixed seeds), and every test's tier
(tests/support/tiers.py) as its marker, so ``-m unit`` (``make test-fast``) selects by it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.tiers import TIERS, tier_of


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIERS):
            continue
        # `slow` (older tests) means more than ~30 s: never the unit tier
        tier = "integration" if item.get_closest_marker("slow") else tier_of(Path(str(item.fspath)))
        item.add_marker(getattr(pytest.mark, tier))


# Two cores: keep every library to one thread per process unless a test asks for more.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _seed():
    import random

    import numpy as np

    random.seed(0)
    np.random.seed(0)
    try:
        import torch
    except ImportError:  # the torch-free server tests
        return
    torch.manual_seed(0)
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def hf_root(tmp_path_factory):
    """Where tests/support/hf_checkpoints.py builds (and exports) its checkpoints, once per session."""
    return tmp_path_factory.mktemp("hf-checkpoints")
