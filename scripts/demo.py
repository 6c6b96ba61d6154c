"""The README's main job; see :mod:`tulip_nb._demo` (also ``tulip-nb demo``)."""

from __future__ import annotations

import sys

from tulip_nb._demo import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
