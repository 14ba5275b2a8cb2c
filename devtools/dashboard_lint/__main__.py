"""`python -m devtools.dashboard_lint`: see devtools.dashboard_lint.cli."""

from devtools.dashboard_lint.cli import main

raise SystemExit(main())
