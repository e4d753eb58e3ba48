"""`kafkacodec mirror`: topics copied between clusters batch by batch, without decompressing
(KIP-712), checkpointed so a restart loses nothing (docs/mirroring.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kafkacodec.cli._exit import EXIT_DATA, EXIT_INPUT, EXIT_USAGE, CliError
from kafkacodec.cli._files import refuse_stream
from kafkacodec.cli._output import FORMATTER, count_arg, size_arg

MIRROR_EXIT_CODES = """exit codes:
  0  done (--until-caught-up) or stopped by SIGTERM/SIGINT after a final checkpoint
  1  the target refused a batch (or source data was corrupt): nothing past the last
     acknowledged batch is checkpointed, a restart continues there
  2  bad arguments or a configuration the mirror refuses: a missing target topic it may
     not (--no-create-topics) or cannot create, a target topic with fewer partitions than
     its source, a --state-dir of other clusters, a damaged checkpoint with no earlier
     good one and no --start (it is moved aside)
  3  a cluster could not be reached, or the state directory could not be written
  4  optional part missing: pip install "kafkacodec[mirror]\""""



def _rename(text: str) -> tuple[str, str]:
    source, sep, target = text.partition(":")
    if not sep or not source or not target:
        raise argparse.ArgumentTypeError(f"--rename takes SOURCE:TARGET, got {text!r}")
    return source, target


def run(args: argparse.Namespace) -> int:
    from kafkacodec.consumer import BrokerError
    from kafkacodec.errors import AuthenticationError
    from kafkacodec.mirror._checkpoint import StateMismatchError
    from kafkacodec.mirror.process import Mirror, MirrorConfig, MirrorError

    refuse_stream(args.state_dir, "mirror", "a directory for --state-dir (where the checkpoint is kept)",
                  dash="a stream")
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not topics:
        raise CliError("--topics names no topic", EXIT_USAGE)
    rename = dict(args.rename or [])
    unknown = set(rename) - set(topics)
    if unknown:
        raise CliError(f"--rename names topics not in --topics: {', '.join(sorted(unknown))}", EXIT_USAGE)
    config = MirrorConfig(
        source=args.source, target=args.target, topics=topics, state_dir=args.state_dir,
        rename=rename, until_caught_up=args.until_caught_up, buffer_memory=args.buffer_memory,
        multi_batch=args.multi_batch, group_id=args.group, start=args.start,
        checkpoint_interval=args.checkpoint_interval, max_in_flight=args.max_in_flight,
        request_timeout=args.request_timeout, metrics_listen=args.metrics_listen,
        progress=False if args.no_progress else None, create_topics=not args.no_create_topics,
        source_security=_client_properties(args.source_config, "--source-config"),
        target_security=_client_properties(args.target_config, "--target-config"))
    mirror = Mirror(config)
    outcome = "failed"
    try:
        code = mirror.run(install_signals=True)
        outcome = "stopped" if mirror.stopping else "caught up" if args.until_caught_up else "done"
        return code
    except (MirrorError, StateMismatchError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except BrokerError as exc:
        raise CliError(f"{exc}; the checkpoint in {args.state_dir} keeps the last acknowledged "
                       "position", EXIT_DATA) from None
    except AuthenticationError as exc:
        raise CliError(f"{exc}; check --source-config / --target-config", EXIT_INPUT) from None
    except (ConnectionError, TimeoutError) as exc:
        raise CliError(f"cannot reach the cluster: {exc}", EXIT_INPUT) from None
    finally:
        if mirror.producer is not None:           # it started: a line for logs (cron, systemd)
            print(mirror.summary(outcome), file=sys.stderr)


def _client_properties(path: str | None, flag: str) -> Any:
    """A ClientSecurity from a client.properties file; one error line for a bad one."""
    if path is None:
        return None
    from kafkacodec.net.properties import ClientSecurity

    refuse_stream(path, "mirror", f"a client properties file for {flag}", dash="a stream")
    try:
        return ClientSecurity.from_file(path)
    except OSError as exc:
        raise CliError(f"{flag} {path}: {exc.strerror or exc}", EXIT_INPUT) from None
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}", EXIT_USAGE) from None



def add_parser(subparsers: Any) -> None:
    m = subparsers.add_parser(
        "mirror", formatter_class=FORMATTER,
        help="mirror topics between clusters, batches as they are (KIP-712; needs kafkacodec[mirror])",
        description="Copy topics from a source cluster to a target cluster without decompressing: "
                    "whole batches, producer ids rewritten for the target (idempotent, acks=all), "
                    "control batches and aborted transactions dropped. The position after the last "
                    "batch the target acknowledged is checkpointed atomically in --state-dir, so a "
                    "restart (even after kill -9) loses nothing; it may write again what was "
                    "acknowledged after the last checkpoint or in flight (at most --max-in-flight "
                    "batches per partition, plus --checkpoint-interval seconds' worth).",
        epilog="examples:\n"
               "  kafkacodec mirror --source old:9092 --target new:9092 --topics orders,users \\\n"
               "      --state-dir /var/lib/mirror --until-caught-up\n"
               "  kafkacodec mirror --source a:9092 --target b:9092 --topics orders \\\n"
               "      --rename orders:orders-dc1 --state-dir /var/lib/mirror \\\n"
               "      --metrics-listen 127.0.0.1:9400\n\n" + MIRROR_EXIT_CODES)
    m.add_argument("--source", required=True, metavar="BOOTSTRAP", help="source cluster host:port[,host:port]")
    m.add_argument("--target", required=True, metavar="BOOTSTRAP", help="target cluster host:port[,host:port]")
    m.add_argument("--topics", required=True, metavar="T[,T...]", help="source topics to mirror")
    m.add_argument("--rename", type=_rename, action="append", metavar="A:B",
                   help="write source topic A to target topic B (repeatable)")
    m.add_argument("--state-dir", required=True, metavar="DIR", help="where the checkpoint is kept")
    m.add_argument("--until-caught-up", action="store_true",
                   help="exit 0 once everything in the source at start is acknowledged by the target")
    m.add_argument("--buffer-memory", type=size_arg(1), default=64 << 20, metavar="BYTES",
                   help="memory for fetched data (KIP-81 pool; default 64M)")
    m.add_argument("--multi-batch", action="store_true",
                   help="several batches per partition per ProduceRequest (only for a target that "
                        "accepts it; Kafka brokers answer INVALID_RECORD)")
    m.add_argument("--group", metavar="GROUP", help="also commit the positions to this source consumer group")
    m.add_argument("--start", choices=("earliest", "latest", "committed"),
                   help="where to start without a checkpoint (committed: --group's offsets; default "
                        "earliest); given, also where to start when the checkpoint is damaged")
    m.add_argument("--checkpoint-interval", type=float, default=1.0, metavar="SECONDS",
                   help="time between checkpoints (0: after every acknowledgement; default 1)")
    m.add_argument("--max-in-flight", type=count_arg(1), default=5, metavar="N",
                   help="unacknowledged batches per partition (at most 5, Kafka's idempotence limit)")
    m.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS")
    m.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics there")
    m.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    m.add_argument("--no-create-topics", action="store_true",
                   help="refuse a missing target topic instead of creating it with the source's "
                        "partition count and topic configs (as MirrorMaker 2 does)")
    m.add_argument("--source-config", metavar="FILE",
                   help="client properties for the source cluster: security.protocol, ssl.*, "
                        "sasl.* (Kafka's or librdkafka's names; docs/security.md)")
    m.add_argument("--target-config", metavar="FILE", help="the same for the target cluster")
    m.set_defaults(run=run)
