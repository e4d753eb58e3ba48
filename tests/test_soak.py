"""The soak (tests/soak.py) in CI: `kafkacodec serve` for SOAK_SECONDS (default 30) under good
clients and the hostile mix, with a descriptor limit and small pools.  The nightly workflow runs
it longer (SOAK_SECONDS=1200)."""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = [pytest.mark.soak, pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")]

SECONDS = float(os.environ.get("SOAK_SECONDS", "30"))


def test_serve_holds_under_abuse_and_every_good_client_gets_every_record(tmp_path):
    from soak import log_dir_soak

    result = log_dir_soak(tmp_path / "logs", SECONDS)
    assert not result.problems(), (result.problems(), result)
    assert set(result.passes) == {"fetch-v11", "fetch-v3"}, result
    # every defence was exercised, and the server says so in its metrics
    for reason in ("idle", "request_read_timeout", "response_write_timeout", "request_too_costly",
                   "request_too_large", "malformed"):
        assert result.closed.get(reason, 0) > 0, (reason, result.closed)
