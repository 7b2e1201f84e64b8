"""``python -m actors.testing --responder mod:fn``: serve a responder until interrupted."""

from actors.testing.server import main

raise SystemExit(main())
