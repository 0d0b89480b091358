"""``python -m proxy``: the same as the ``crossway`` command."""

from proxy.server.cli import main

raise SystemExit(main())
