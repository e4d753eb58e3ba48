"""The read cursor's out-of-line error paths: C-level only (see _cursor.pxd), no Python names."""
