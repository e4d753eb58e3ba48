"""The soak (tests/soak.py) in CI: `kafkacodec serve` over a log directory, and as the gateway
`serve --upstream` in front of librdkafka's mock cluster, each for SOAK_SECONDS (default 20)
under good clients and the hostile mix, with a descriptor limit and small pools.  The nightly
workflow runs them longer (SOAK_SECONDS=1200)."""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = [pytest.mark.soak, pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")]

SECONDS = float(os.environ.get("SOAK_SECONDS", "20"))


def assert_held(result):
    assert not result.problems(), (result.problems(), result)
    assert set(result.passes) == {"fetch-v11", "fetch-v3"}, result
    # every defence was exercised, and the server says so in its metrics
    for reason in ("idle", "request_read_timeout", "response_write_timeout", "request_too_costly",
                   "request_too_large", "malformed"):
        assert result.closed.get(reason, 0) > 0, (reason, result.closed)


def test_serve_holds_under_abuse_and_every_good_client_gets_every_record(tmp_path):
    from soak import log_dir_soak

    assert_held(log_dir_soak(tmp_path / "logs", SECONDS))


def test_the_gateway_holds_under_abuse_and_every_good_client_gets_every_record():
    """The same clients and hostile mix against `serve --upstream` in front of librdkafka's mock
    cluster (records of every codec): every good pass exact and on time, the same bounds (plus
    the gateway's own two memory limits)."""
    pytest.importorskip("confluent_kafka")
    from soak import gateway_soak

    assert_held(gateway_soak(SECONDS))
