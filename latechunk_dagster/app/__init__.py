"""The embedded default app (shipped model, ``./data``, demo corpus, CLI): one client of the factory."""
