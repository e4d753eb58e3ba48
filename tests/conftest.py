"""Shared fixtures. An exception swallowed inside Cython ("Exception ignored ...") reaches
sys.unraisablehook; pytest turns it into a warning, which pyproject makes an error."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))   # test support modules (kafka_oracle, s3_server...)
if os.environ.get("KAFKACODEC_TEST_INSTALLED") == "1" or os.environ.get("KAFKACODEC_SANITIZED") == "1":
    # Children started with `python -c` from the checkout would put it first on sys.path and
    # import the unbuilt source tree instead of the installed wheel or the instrumented build
    # (Python >= 3.11).
    os.environ["PYTHONSAFEPATH"] = "1"

import kafkacodec

# Tests that run a real Kafka broker or Kafka's own Java tools and clients are marked `broker`
# (by their fixtures, or a module's pytestmark): the sanitizer run leaves them out, as their part
# of the compiled core is what the rest of the suite drives under ASan; the installed run has them.
BROKER_FIXTURES = {"kafka_broker", "kafka_broker_39", "kafka_broker_secured",
                   "kafka_pool"}     # kafka_pool: Kafka's own pool in a JVM


#: Modules that test services over sockets (deadlines, limits, TLS, SASL, groups, the gateway,
#: the mirror process): their time is waits and Python, the compiled paths they cross are
#: driven in-process by the rest of the suite and the fuzz harnesses.  Left out under ASan.
SERVICE_MODULES = {"test_serve_upstream", "test_serve_security", "test_serve_limits", "test_serve_groups",
                   "test_serve_live", "test_mirror_e2e", "test_mirror_process", "test_state_files",
                   "test_net_tls", "test_net_sasl", "test_net_loop", "test_net_users", "test_net_acl",
                   "test_net_properties", "test_soak", "test_docs_blocks_services"}


#: Modules whose tests start Spark in subprocesses without the marker (none now: the README's
#: blocks are separate tests that pytest-xdist shares out between the workers).
SPARK_MODULES: set[str] = set()


@pytest.hookimpl(tryfirst=True)      # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = getattr(item, "module", None)
        module = module.__name__.rsplit(".", 1)[-1] if module is not None else ""
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)
        if module in SERVICE_MODULES:
            item.add_marker(pytest.mark.service)
        # scripts/test.sh runs three workers (-n 3 --dist loadgroup): one takes the tests of the
        # session's Kafka brokers, one the Spark tests (each JVM kind started once, and never both
        # on one worker at a time), and the rest is shared out test by test.  (pytest < 9.2, the
        # test extra's pin: 9.2's node ids ignore the "@group" suffix pytest-xdist 3.8 writes,
        # and every test would be shared out alone, each worker starting its own JVMs.)
        if item.get_closest_marker("broker"):
            item.add_marker(pytest.mark.xdist_group("kafka"))
        elif item.get_closest_marker("spark") or module in SPARK_MODULES:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session", autouse=True)
def _children_are_not_xdist_workers():
    """pytest-xdist marks its workers with PYTEST_XDIST_* variables, which children inherit: a
    pytest the tests start (the README's benchmark commands) would take itself for a worker
    (pytest-benchmark then refuses --benchmark-only)."""
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
        del os.environ[name]


@pytest.fixture(scope="session", autouse=True)
def _compiled_core_in_use():
    assert kafkacodec.__compiled__, "the compiled core is not loaded"
    if os.environ.get("KAFKACODEC_TEST_INSTALLED") == "1":
        # CI tests the installed wheel, not the source tree.
        assert "site-packages" in kafkacodec.__file__, kafkacodec.__file__


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API server (moto's standalone server) on loopback, for the whole session."""
    pytest.importorskip("moto", reason="the S3 tests need moto[server] (the test extra)")
    from s3_server import start

    server = start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark(request, tmp_path_factory):
    """One local SparkSession per pytest worker: a JVM start is 25-35 s under load, and a
    module's own session would be started again whenever the worker's order leaves its module
    and comes back.  The Spark tests share one worker (above); those that also use a Kafka
    broker run on the brokers' worker, which then starts a session of its own.  The JVM and its
    Python workers see moto's S3 server through the environment (AWS_ENDPOINT_URL...) when moto is
    installed.  A module that needs other runtime settings sets them and restores them."""
    pytest.importorskip("pyspark")
    from spark_support import local_session

    try:
        s3_env = request.getfixturevalue("s3_server").env
    except pytest.skip.Exception:                 # no moto: the S3 tests skip
        s3_env = {}
    saved = dict(os.environ)
    os.environ.update(s3_env)
    try:
        with local_session(tmp_path_factory.mktemp("spark-cwd"), "kafkacodec-tests",
                           executor_env=s3_env) as session:
            yield session
    finally:
        os.environ.clear()
        os.environ.update(saved)


from tiered_support import tiered_log, tiered_s3  # noqa: E402,F401  (session fixtures: a partition Kafka tiered)
from broker_logs import compacted_log, txn_log  # noqa: E402,F401  (session fixtures: directories Kafka wrote)


def _broker_fixture(version, **options):
    from kafka_broker import BrokerUnavailable, KafkaBroker

    try:
        broker = KafkaBroker.start(version, **options)
    except BrokerUnavailable as exc:
        if os.environ.get("KAFKACODEC_REQUIRE_BROKER") == "1":
            raise
        pytest.skip(f"no real Kafka broker here: {exc}")
    return broker


@pytest.fixture(scope="session")
def kafka_broker():
    """A real Kafka 4.x broker (KRaft, loopback) from Maven Central's jars, for the session; tiered
    storage is on (Kafka's LocalTieredStorage under `broker.remote_dir`) for the topics created
    with remote.storage.enable=true."""
    broker = _broker_fixture(__import__("kafka_broker").DEFAULT_VERSION, tiered=True)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_broker_39():
    """A real Kafka 3.9 broker: the last line with down-conversion (old consumers' reference)."""
    broker = _broker_fixture(__import__("kafka_broker").DOWNCONVERSION_VERSION)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def kafka_broker_secured(tmp_path_factory):
    """A real Kafka 4.x broker with listeners SASL_SSL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) and
    SSL (client certificate required) besides PLAINTEXT; `.security` holds its certificates
    (trustme), users and the client settings (tests/kafka_broker.py).  Per module: a start
    takes 5-10 s, and each module's tests should see only their own topics and groups."""
    pytest.importorskip("trustme", reason="the secured broker's certificates are made with trustme (test extra)")
    from kafka_broker import DEFAULT_VERSION, SecurityFiles

    broker = _broker_fixture(DEFAULT_VERSION, security=SecurityFiles.create(tmp_path_factory.mktemp("broker-tls")))
    yield broker
    broker.stop()
