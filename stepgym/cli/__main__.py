"""``python -m stepgym.cli``: the ``stepgym`` command."""

from stepgym.cli import main

raise SystemExit(main())
