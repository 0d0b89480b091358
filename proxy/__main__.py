"""``python -m proxy``: the same as the ``crossway`` command."""

from proxy.cli import main

raise SystemExit(main())
