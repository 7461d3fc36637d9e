"""Fixtures of the tools tests: the real SmolLM2 model through corral.model's cached loader."""

import pytest


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct as `corral.model.load_model()` gives it (downloaded and converted
    into the cache on first use)."""
    from corral.model import load_model

    return load_model(progress=False)
