"""`kafkacodec serve`: a read-only Kafka broker over log directories, or a gateway to a cluster
(--upstream) for clients old and new (docs/serve.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from kafkacodec.cli._exit import EXIT_CODES, EXIT_INPUT, EXIT_OK, EXIT_USAGE, CliError
from kafkacodec.cli._files import refuse_stream
from kafkacodec.cli._output import FORMATTER, count_arg, size_arg


def _address_arg(text: str) -> tuple[str, int]:
    from kafkacodec.serve.config import parse_host_port

    try:
        return parse_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _topic_switch_arg(text: str) -> tuple[str, bool]:
    topic, sep, value = text.rpartition("=")
    if not sep or not topic or value.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not TOPIC=true or TOPIC=false")
    return topic, value.lower() == "true"


def run(args: argparse.Namespace) -> int:
    import logging
    import signal

    from kafkacodec.serve import Server, ServeConfig

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    security, upstream_security = _security(args)
    for path in args.log_dirs:
        if "://" in path:                    # a tiered-storage store on an object store: LogView checks it
            continue
        refuse_stream(path, "serve", "Kafka log directories (it follows their segments as they grow)")
        if not os.path.isdir(path):
            raise CliError(f"{path}: not a directory; give Kafka log directories (holding "
                           "<topic>-<partition>/<base offset>.log files)", EXIT_INPUT)
    refuse_stream(args.state_dir, "serve", "a directory for --state-dir (where group offsets persist)",
                  dash="a stream")
    _raise_descriptor_limit()
    try:
        config = ServeConfig(
            log_dirs=args.log_dirs, listen=args.listen, advertised=args.advertised_listener,
            state_dir=args.state_dir, metrics_listen=args.metrics_listen,
            max_conversion_memory=args.max_conversion_memory,
            max_request_memory=args.max_request_memory,
            socket_request_max_bytes=args.socket_request_max_bytes,
            downconversion=not args.no_downconversion,
            topic_downconversion=dict(args.topic_downconversion or []),
            zstd_codec=None if args.zstd_downconvert_codec == "refuse" else args.zstd_downconvert_codec,
            node_id=args.node_id,
            poll_interval_ms=args.poll_interval_ms,
            group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
            group_min_session_timeout_ms=args.group_min_session_timeout_ms,
            group_max_session_timeout_ms=args.group_max_session_timeout_ms,
            upstream=args.upstream, upstream_buffer_memory=args.upstream_buffer_memory,
            upstream_cache_memory=args.upstream_cache_memory, produce=args.produce,
            connections_max_idle_ms=args.connections_max_idle_ms,
            request_read_timeout_ms=args.request_read_timeout_ms,
            response_write_timeout_ms=args.response_write_timeout_ms,
            max_connections=args.max_connections, max_request_entries=args.max_request_entries,
            handshake_timeout_ms=args.handshake_timeout_ms,
            security=security, upstream_security=upstream_security)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    # The handler only records the signal: it runs in the main thread between two bytecodes,
    # possibly while that thread holds an Event's lock (Event.set() there can deadlock).
    signalled: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: signalled.append(number))
    try:
        server = Server(config=config).start()
    except OSError as exc:                    # the upstream cluster unreachable, the port taken
        raise CliError(str(exc), EXIT_INPUT) from None
    try:
        host, port = server.address
        print(f"listening on {host}:{port}", flush=True)
        for listening in server.listening:
            print(listening.describe(), flush=True)
        if not args.upstream:                 # what the log directories hold
            partitions, what = server.view.summary()
            print(f"serving {what}", flush=True)
            if not partitions:
                print(f"kafkacodec serve: warning: no Kafka segment in {', '.join(args.log_dirs)} "
                      "(<topic>-<partition>/<base offset>.log): clients see a broker with no "
                      "topics", file=sys.stderr, flush=True)
        while not signalled and not server.wait(0.2):
            pass
    finally:
        server.stop()
    return EXIT_OK


#: Kafka broker properties of a --config file -> ServeConfig fields (flags given on the command
#: line win over the file).
_BROKER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "connections.max.idle.ms": ("connections_max_idle_ms", int),
    "socket.request.max.bytes": ("socket_request_max_bytes", int),
    "queued.max.request.bytes": ("max_request_memory", int),
    "max.connections": ("max_connections", int),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", int),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", int),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", int),
    "node.id": ("node_id", int),
    "log.message.downconversion.enable": ("no_downconversion", lambda v: v.strip().lower() == "false"),
    "kafkacodec.request.read.timeout.ms": ("request_read_timeout_ms", int),
    "kafkacodec.response.write.timeout.ms": ("response_write_timeout_ms", int),
    "kafkacodec.max.request.entries": ("max_request_entries", int),
    "kafkacodec.handshake.timeout.ms": ("handshake_timeout_ms", int),
    "kafkacodec.state.dir": ("state_dir", str),
}


def _security(args: argparse.Namespace) -> tuple[Any, Any]:
    """The broker properties of --config (listeners, TLS, SASL, users and ACL files, and the
    settings above) and the client properties of --upstream-config; one error line for a bad file."""
    security = upstream = None
    try:
        if args.config is not None:
            from kafkacodec.net.properties import BrokerSecurity

            refuse_stream(args.config, "serve", "a broker properties file for --config", dash="a stream")
            security = BrokerSecurity.from_file(args.config)
            defaults = args.flag_defaults
            for key, (dest, convert) in _BROKER_PROPERTIES.items():
                value = security.other.get(key)
                if value is not None and getattr(args, dest) == defaults.get(dest):
                    try:
                        setattr(args, dest, convert(value))
                    except ValueError:
                        raise ValueError(f"{args.config}: {key}={value!r} is not valid") from None
            if not args.log_dirs and not args.upstream and security.other.get("log.dirs"):
                args.log_dirs = [d.strip() for d in security.other["log.dirs"].split(",") if d.strip()]
        if args.upstream_config is not None:
            from kafkacodec.net.properties import ClientSecurity

            refuse_stream(args.upstream_config, "serve", "a client properties file for --upstream-config",
                          dash="a stream")
            upstream = ClientSecurity.from_file(args.upstream_config)
    except OSError as exc:
        raise CliError(f"{exc.filename or exc}: {exc.strerror or exc}", EXIT_INPUT) from None
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return security, upstream


def _raise_descriptor_limit() -> None:
    """A server's descriptors are its connections and segments: the soft limit is raised to the
    hard one (as Go's runtime does), and max_connections follows it unless given."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, OSError, ValueError):
        pass


def add_parser(subparsers: Any) -> None:
    sv = subparsers.add_parser(
        "serve", formatter_class=FORMATTER,
        help="serve log directories to Kafka clients (a read-only broker, old and new clients)",
        description="A read-only Kafka broker over log directories: any consumer (kafka-python, "
                    "librdkafka, aiokafka, the Java client; Fetch v0 to v17) reads the topics "
                    "found there, by assign or in a consumer group. Clients that only speak "
                    "message formats v0/v1 get the data down-converted. Appends to the "
                    "directories are served as they land. Writes are refused (POLICY_VIOLATION). "
                    "The first line on stdout is `listening on HOST:PORT`; SIGTERM and SIGINT "
                    "stop it (exit 0). See docs/serve.md.",
        epilog="examples:\n  kafkacodec serve /backups/kafka-logs --listen 127.0.0.1:9092\n"
               "  kafkacodec serve /var/kafka-logs --listen 0.0.0.0:9092 --advertised-listener "
               "kafka-archive:9092 --state-dir /var/lib/kafkacodec --metrics-listen :9404\n"
               "  kafkacodec serve --upstream kafka4:9092 --listen 0.0.0.0:9092 --advertised-listener "
               "gateway:9092\n\n" + EXIT_CODES)
    sv.add_argument("log_dirs", nargs="*", metavar="LOG_DIR", help="Kafka log directories (log.dirs)")
    sv.add_argument("--upstream", metavar="BOOTSTRAP",
                    help="serve this cluster instead of log directories: a gateway for old clients "
                         "(down-converted) and new ones (the cluster's batches); groups are "
                         "coordinated here and their offsets committed to the cluster")
    sv.add_argument("--produce", action="store_true",
                    help="with --upstream: forward producers to the cluster, Produce v0-2 (which Kafka "
                         "4 refuses) up-converted to v2 batches; an ACL file needs Write:TOPIC rules "
                         "(default: read-only, writes refused)")
    sv.add_argument("--upstream-buffer-memory", type=size_arg(0), default=64 << 20, metavar="BYTES",
                    help="the upstream consumer's memory (KIP-81 pool of its rings, default 64MiB)")
    sv.add_argument("--upstream-cache-memory", type=size_arg(0), default=64 << 20, metavar="BYTES",
                    help="fetched upstream data kept for clients (default 64MiB)")
    sv.add_argument("--listen", type=_address_arg, default=("127.0.0.1", 9092), metavar="HOST:PORT",
                    help="where to listen (port 0: any free port; default 127.0.0.1:9092)")
    sv.add_argument("--advertised-listener", type=_address_arg, metavar="HOST:PORT",
                    help="the address clients are told to connect to (default: the listen address)")
    sv.add_argument("--state-dir", metavar="DIR",
                    help="where consumer group offsets are kept (default: in memory, lost at exit)")
    sv.add_argument("--metrics-listen", type=_address_arg, metavar="HOST:PORT",
                    help="serve Prometheus metrics over HTTP here")
    sv.add_argument("--max-conversion-memory", type=size_arg(0), default=64 << 20, metavar="BYTES",
                    help="memory for every down-conversion at once (default 64MiB)")
    sv.add_argument("--max-request-memory", type=size_arg(0), default=200 << 20, metavar="BYTES",
                    help="memory for requests being received, Kafka's queued.max.request.bytes "
                         "(0: unbounded; default 200MiB)")
    sv.add_argument("--socket-request-max-bytes", type=size_arg(0), default=100 << 20, metavar="BYTES",
                    help="the largest request accepted (socket.request.max.bytes, default 100MiB)")
    sv.add_argument("--no-downconversion", action="store_true",
                    help="log.message.downconversion.enable=false: Fetch v0-3 of newer data gets "
                         "UNSUPPORTED_VERSION")
    sv.add_argument("--topic-downconversion", type=_topic_switch_arg, action="append", metavar="TOPIC=BOOL",
                    help="message.downconversion.enable for one topic (repeatable)")
    sv.add_argument("--zstd-downconvert-codec", choices=("gzip", "snappy", "lz4", "none", "refuse"),
                    default="gzip",
                    help="rebuild zstd batches with this codec for old clients, which cannot read zstd "
                         "(default gzip, which every client reads; refuse: UNSUPPORTED_COMPRESSION_TYPE, "
                         "as Kafka)")
    sv.add_argument("--node-id", type=int, default=0, help="the broker id clients see (default 0)")
    sv.add_argument("--poll-interval-ms", type=count_arg(1), default=10,
                    help="how often waiting fetches look for new data (default 10)")
    sv.add_argument("--group-initial-rebalance-delay-ms", type=count_arg(0), default=0,
                    help="group.initial.rebalance.delay.ms (default 0)")
    limits = sv.add_argument_group("connection limits (docs/reliability.md)")
    limits.add_argument("--connections-max-idle-ms", type=count_arg(1), default=600_000, metavar="MS",
                        help="close a connection with nothing in progress and no traffic for this "
                             "long (connections.max.idle.ms, default 600000)")
    limits.add_argument("--request-read-timeout-ms", type=count_arg(1), default=30_000, metavar="MS",
                        help="a request must arrive whole within this long of its first byte, "
                             "else the connection closes (default 30000)")
    limits.add_argument("--response-write-timeout-ms", type=count_arg(1), default=30_000, metavar="MS",
                        help="close a connection whose client reads nothing of its response for "
                             "this long (default 30000)")
    limits.add_argument("--handshake-timeout-ms", type=count_arg(1), default=10_000, metavar="MS",
                        help="the TLS handshake and the SASL exchange must end within this long "
                             "of the connection's start (default 10000)")
    limits.add_argument("--max-connections", type=count_arg(1), metavar="N",
                        help="stop accepting at this many connections (max.connections; default: "
                             "half the descriptor limit)")
    limits.add_argument("--max-request-entries", type=count_arg(1), default=20_000, metavar="N",
                        help="topics, partitions and other array entries one request may hold; "
                             "more closes the connection before any work (default 20000)")
    sv.add_argument("--group-min-session-timeout-ms", type=count_arg(0), default=6000, metavar="MS",
                    help="group.min.session.timeout.ms: shorter session timeouts are refused "
                         "(INVALID_SESSION_TIMEOUT; default 6000)")
    sv.add_argument("--group-max-session-timeout-ms", type=count_arg(0), default=1800000, metavar="MS",
                    help="group.max.session.timeout.ms (default 1800000)")
    sv.add_argument("--config", metavar="FILE",
                    help="Kafka broker properties: listeners (PLAINTEXT, SSL, SASL_PLAINTEXT, "
                         "SASL_SSL; several), advertised.listeners, ssl.keystore.* (PEM), "
                         "ssl.truststore.*, ssl.client.auth, sasl.enabled.mechanisms, "
                         "kafkacodec.users.file, kafkacodec.acl.file, and limits by Kafka's names "
                         "(docs/security.md); flags given here win over the file")
    sv.add_argument("--upstream-config", metavar="FILE",
                    help="client properties for --upstream (security.protocol, ssl.*, sasl.*: "
                         "Kafka's or librdkafka's names; docs/security.md)")
    sv.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    sv.set_defaults(run=run, flag_defaults={a.dest: a.default for a in sv._actions})
