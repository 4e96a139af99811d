"""``python -m otlp.cli``: the ``otlp`` command."""

import sys

from otlp.cli.commands import main

sys.exit(main())
