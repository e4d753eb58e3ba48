"""Exit codes of the `kafkacodec` command, the error that carries one, and the mapping of every
other failure to one `kafkacodec: error:` line and its code (docs/cli.md has the table)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["EXIT_OK", "EXIT_DATA", "EXIT_USAGE", "EXIT_INPUT", "EXIT_UNAVAILABLE", "EXIT_INTERRUPTED",
           "EXIT_CODES", "CliError", "OPTIONAL_MODULES", "run_reporting_errors"]

EXIT_OK = 0
EXIT_DATA = 1          # corrupt data found, or corrupt data stopped the command
EXIT_USAGE = 2         # bad arguments: argparse, OUT is the input, segments in the way
EXIT_INPUT = 3         # a file that cannot be read or written (missing, not regular, disk full)
EXIT_UNAVAILABLE = 4   # an optional part is not installed (pyarrow, pyspark)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)

EXIT_CODES = """exit codes (docs/cli.md):
  0  success, and no problem found in the data
  1  a problem in the data: found (verify; dump: a bad CRC, broken framing, a partial
     last batch, index entries that do not match; read: any problem reported) or
     stopping the command
  2  bad arguments (also: OUT is the input, or generate would replace other segments)
  3  a file could not be read or written: missing, not a regular file, no permission,
     no space left (OUT is then left as it was); a stream (-, a FIFO) where the
     command needs a file or directory, or one longer than a segment (2 GiB)
  4  optional part missing: pip install "kafkacodec[arrow]" (verify, read),
     "kafkacodec[spark]" (spark), "kafkacodec[serve]" (serve), "kafkacodec[mirror]" (mirror)"""

# The extra that provides each optional top-level module.
OPTIONAL_MODULES = {"pyarrow": "arrow", "pyspark": "spark", "pandas": "spark",
                    "prometheus_client": "mirror"}
# Commands whose own extra holds every optional module they import.
COMMAND_EXTRAS = {"serve": "serve", "mirror": "mirror"}


class CliError(Exception):
    """A failure the command explains itself: its message is printed as is, with `code`."""

    def __init__(self, message: str, code: int = EXIT_DATA):
        super().__init__(message)
        self.code = code


def _os_error_text(exc: OSError) -> str:
    if exc.strerror and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def run_reporting_errors(command: str, run: Callable[[], int]) -> int:
    """`run()`'s exit status; every failure becomes one `kafkacodec: error:` line on stderr and
    its exit code (no traceback)."""
    from kafkacodec._atomic import SameFileError
    from kafkacodec.cli._files import shown
    from kafkacodec.errors import KafkaCodecError, UnsupportedCompressionError

    try:
        return run()
    except CliError as exc:
        code, message = exc.code, str(exc)
    except SameFileError as exc:
        code, message = EXIT_USAGE, str(exc)
    except UnsupportedCompressionError as exc:
        hint = "; `convert --recompress lz4` (or gzip, snappy, none) converts them" if command == "convert" else ""
        code, message = EXIT_DATA, (f"{exc}; Kafka refuses this too (UNSUPPORTED_COMPRESSION_TYPE): "
                                    f"old clients cannot read such batches{hint}")
    except KafkaCodecError as exc:
        # say the verify hint once: logdir's errors end in their own (`verify DIR`)
        said = "`kafkacodec verify " in str(exc)
        code, message = EXIT_DATA, str(exc) if said else f"{exc}; `kafkacodec verify PATH` lists every problem"
    except ImportError as exc:
        extra = OPTIONAL_MODULES.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        extra = COMMAND_EXTRAS.get(command, extra)
        code, message = EXIT_UNAVAILABLE, (f"`kafkacodec {command}` needs {exc.name}, which is not "
                                           f'installed: pip install "kafkacodec[{extra}]"')
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's final flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:
        code, message = EXIT_INPUT, _os_error_text(exc)
    except KeyboardInterrupt:
        code, message = EXIT_INTERRUPTED, "interrupted"
    print(f"kafkacodec: error: {shown(message)}", file=sys.stderr)   # a stream by its name
    return code
