"""Shared fixtures. An exception swallowed inside Cython ("Exception ignored ...") reaches
sys.unraisablehook; pytest turns it into a warning, which pyproject makes an error."""

import os

import pytest

import kafkacodec


@pytest.fixture(scope="session", autouse=True)
def _compiled_core_in_use():
    assert kafkacodec.__compiled__, "the compiled core is not loaded"
    if os.environ.get("KAFKACODEC_TEST_INSTALLED") == "1":
        # CI tests the installed wheel, not the source tree.
        assert "site-packages" in kafkacodec.__file__, kafkacodec.__file__
