"""Reading the security files (users, ACLs): UTF-8 text, errors naming the file and line."""

from __future__ import annotations

import os
from typing import Union

__all__ = ["read_utf8"]

PathLike = Union[str, "os.PathLike[str]"]


def read_utf8(path: PathLike) -> tuple[str, int]:
    """The file's text and its mode bits (st_mode); bytes that are not UTF-8 raise ValueError
    naming the file and the line."""
    with open(path, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        data = f.read()
    try:
        return data.decode("utf-8"), mode
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ValueError(f"{os.fspath(path)}:{line}: not UTF-8") from None
