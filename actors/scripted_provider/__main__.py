"""``python -m actors.scripted_provider --responder mod:fn``: serve a responder until interrupted."""

from actors.scripted_provider.server import main

raise SystemExit(main())
