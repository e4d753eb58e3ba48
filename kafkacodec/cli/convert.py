"""`kafkacodec convert`: a segment converted to another magic, chunk by chunk, written
atomically: down to magic 0 or 1 (KIP-283's lazy down-conversion) or up to v2 batches
(up_convert_log: offsets and timestamps kept)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kafkacodec.cli._exit import EXIT_CODES, EXIT_OK, EXIT_USAGE, CliError
from kafkacodec.cli._files import local, name_output, open_segment, refuse_stream, segment_head, spooled
from kafkacodec.cli._output import FORMATTER, emit_json


#: input bytes per up-conversion chunk (its output is about as large)
UP_CHUNK_BYTES = 8 << 20


def run(args: argparse.Namespace) -> int:
    """Convert a segment chunk by chunk (down: KIP-283 chunks; up: up_convert_log's): memory
    stays bounded by the chunk size.

    First every CRC is checked (unless --no-verify: the rebuilt batches would get fresh, valid
    CRCs for corrupt data) and a partial last batch is looked for (exit 1 unless
    --allow-partial-tail); the conversion writes OUT atomically, so on any failure OUT is as
    it was."""
    from kafkacodec import LazyDownConvertRecords, up_convert_log
    from kafkacodec._atomic import atomic_output
    from kafkacodec._progress import Progress
    from kafkacodec.errors import InvalidCrcError
    from kafkacodec.logdir._problems import not_a_segment

    src = args.input
    warnings = []
    if args.to_magic == 2 and args.recompress:
        raise CliError("--recompress is for --to-magic 0 or 1 (v2 batches hold zstd)", EXIT_USAGE)
    if args.output == "-":          # (a FIFO or a device as OUT: atomic_output refuses it)
        refuse_stream(args.output, "convert", "a file to write OUT into (atomically: a temporary "
                      "file beside it, renamed)", dash="stdout")
    with spooled([src], "convert"), open_segment(src, "convert") as segment, \
            atomic_output(args.output, inputs=[src, local(src)]) as out, open(local(src), "rb") as f:
        total = segment.size_in_bytes
        reason = not_a_segment(segment_head(segment), total)
        if reason is not None:
            raise CliError(f"{src}: this is not a Kafka segment: {reason}")
        if not args.no_verify:
            try:
                segment.validate()
            except InvalidCrcError as exc:
                raise CliError(f"{src}: {exc}; not converting corrupt data (--no-verify converts "
                               "it anyway, with new checksums on the rebuilt batches)") from None
        tail = segment.partial_tail_bytes
        if tail:
            at = total - tail
            problem = (f"{tail} bytes of a partial batch at byte {at} of {src} (a cut last batch; "
                       "Kafka's recovery truncates it)")
            if not args.allow_partial_tail:
                raise CliError(f"{problem}: not converting; --allow-partial-tail converts the "
                               "complete batches before it")
            warnings.append(f"left out {problem}")
            print(f"kafkacodec: warning: {warnings[-1]}", file=sys.stderr)
        converted = out_bytes = 0
        with Progress(total, "convert", unit="B", enabled=False if args.no_progress else None) as bar:
            chunks = (up_convert_log(segment, chunk_bytes=UP_CHUNK_BYTES) if args.to_magic == 2
                      else LazyDownConvertRecords(f, args.to_magic, recompress=args.recompress))
            for chunk in chunks:
                try:
                    out_bytes += out.write(chunk.records.buffer)
                except OSError as exc:
                    raise name_output(exc, args.output)
                converted += chunk.stats.records_converted
                bar.set(min(out_bytes, total))      # output bytes: about the input's
    result = {"input": str(src), "output": str(args.output), "to_magic": args.to_magic,
              "input_bytes": total, "output_bytes": out_bytes, "records_converted": converted,
              "crc_checked": not args.no_verify, "recompress": args.recompress, "partial_tail_bytes": tail,
              "partial_tail_position": total - tail if tail else None, "warnings": warnings}
    if args.json:
        emit_json(result)
    else:
        dropped = " (control batches dropped)" if args.to_magic < 2 else ""
        print(f"{src} -> {args.output}: magic {args.to_magic}, {converted} records rebuilt, "
              f"{total} -> {out_bytes} bytes{dropped}")
    return EXIT_OK


def add_parser(subparsers: Any) -> None:
    c = subparsers.add_parser("convert", help="convert a segment to magic 0, 1 or 2 (chunked, bounded memory)",
                              formatter_class=FORMATTER,
                              description="Down-convert a segment as a broker does for old consumers (magic 0 "
                                          "or 1), or up-convert its magic 0/1 messages to v2 batches, every "
                                          "offset and timestamp kept (magic 2). Every CRC "
                                          "is checked first, and a partial last batch stops the command, so "
                                          "corrupt data never comes out with fresh checksums. OUT is written "
                                          "to a temporary file beside it and renamed into place: on any "
                                          "failure it is left as it was.",
                              epilog="examples:\n  kafkacodec convert --to-magic 1 in.log out.log\n"
                                     "  kafkacodec convert --to-magic 0 --allow-partial-tail active.log out.log\n"
                              "  kafkacodec convert --to-magic 1 --recompress lz4 zstd.log out.log\n"
                              "  kafkacodec convert --to-magic 2 old-0.9.log out.log\n"
                              "  zcat seg.log.gz | kafkacodec convert --to-magic 1 - out.log\n\n"
                                     + EXIT_CODES)
    c.add_argument("--to-magic", type=int, choices=(0, 1, 2), required=True,
                   help="0 or 1: down-convert (as a broker for old consumers); 2: up-convert magic 0/1 "
                        "messages to v2 batches (v2 batches are copied)")
    c.add_argument("input", metavar="IN", help="a segment file; or a stream of one: - (stdin), a FIFO, "
                                                "<(zcat seg.log.gz)")
    c.add_argument("output", metavar="OUT")
    c.add_argument("--no-verify", action="store_true",
                   help="do not check CRCs first (corrupt batches that are rebuilt get valid CRCs)")
    c.add_argument("--allow-partial-tail", action="store_true",
                   help="convert the complete batches of a segment whose last batch is cut "
                        "(a warning, exit 0) instead of exit 1")
    c.add_argument("--recompress", choices=("lz4", "gzip", "snappy", "none"), metavar="CODEC",
                   help="zstd batches (which magic 0 and 1 cannot hold; Kafka answers old clients "
                        "UNSUPPORTED_COMPRESSION_TYPE) are recompressed with CODEC (lz4, gzip, snappy, none) "
                        "and converted; without it they stop the command (exit 1)")
    c.add_argument("--json", action="store_true", help="print one JSON result on stdout")
    c.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    c.set_defaults(run=run)
