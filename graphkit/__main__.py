"""python -m graphkit."""

from graphkit.cli import main

raise SystemExit(main())
