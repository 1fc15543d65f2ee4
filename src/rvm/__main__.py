"""``python -m rvm``: the ``rvm`` command line (`rvm.cli`)."""

from __future__ import annotations

import sys

from rvm.cli import main

if __name__ == "__main__":
    sys.exit(main())
