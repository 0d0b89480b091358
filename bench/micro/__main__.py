"""``python -m bench.micro``: see :mod:`bench.micro.cli`."""

from bench.micro.cli import main

raise SystemExit(main())
