from typing import Any

import numpy as np
from typing_extensions import Buffer

INDEX_DTYPE: np.dtype[np.void]

SCAN_FIELDS: tuple[str, ...]

def scan_entries(
    data: Buffer,
    start: int = 0,
    end: int = -1,
    *,
    source: str = "<buffer>",
    base: int = 0,
    strict: bool = True,
    check_crc: bool = False,
) -> dict[str, Any]: ...
