"""The fenced code blocks of README.md and docs/*.md, as tests/test_docs_blocks.py and
tests/test_docs_blocks_services.py run them: a block is known by its file and its index among
the file's python/bash/sh/console blocks."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = ("python", "bash", "sh", "console")
# every fence (any language, so another language's block is passed over whole), indented or not
FENCE = re.compile(r"^( *)```([^\s`]*)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)


def fenced_blocks(name: str) -> list[tuple[str, str]]:
    """(language, text) of every python/bash/sh/console block of ROOT/name, in order, the text
    dedented by its fence's own indentation (a block inside a list item)."""
    text = (ROOT / name).read_text(encoding="utf-8")
    return [(lang, textwrap.dedent(body)) for _, lang, body in FENCE.findall(text) if lang in LANGUAGES]
