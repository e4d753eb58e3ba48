# C-level only: entry framing errors (see _format.pxd); nothing Python-visible.
