"""``python -m beava`` is the ``beava`` command."""

import sys

from beava.cli import main

sys.exit(main())
