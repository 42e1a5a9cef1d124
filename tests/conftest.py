"""Shared fixtures: tiny configs (d_model 32, 2 layers), fixed seeds."""

from __future__ import annotations

import os

import pytest

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
    """Where tests/hf_checkpoints.py builds (and exports) its checkpoints, once per session."""
    return tmp_path_factory.mktemp("hf-checkpoints")
