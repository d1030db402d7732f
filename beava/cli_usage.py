"""The argument parser of every ``beava`` command (beava/cli.py, cli_inspect.py, cli_wal.py
import it from here, so the command modules do not import each other)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class UsageParser(argparse.ArgumentParser):
    """Every ``beava`` command's parser: a usage error prints the usage and the error on
    stderr and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)
