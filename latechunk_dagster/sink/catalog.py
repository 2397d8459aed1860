"""Which tables a LanceDB database holds: every page of ``list_tables``, in one place (issue 39 C7).

``DBConnection.list_tables()`` answers one page: ``ListTablesResponse(tables, page_token)``, the
token set while more names follow. LanceDB Cloud pages its answer (a database with more tables
than one page returns the first page and a token); a local or object-store database pages too when
asked for a ``limit`` (LanceDB 0.40: the token is the last name of the page). Reading only the first
page misses tables, and with them the rows a partition sync must delete. Everything in this package
that asks which tables exist goes through :func:`table_names`.
"""

from __future__ import annotations

from typing import Any


def table_names(db: Any, *, page_size: int | None = None) -> list[str]:
    """Every table name of the LanceDB connection ``db``, following ``page_token`` to the last page.

    Args:
        db: a LanceDB connection (``lancedb.connect(...)``: local, object store or Cloud).
        page_size: names asked for per page (``list_tables(limit=...)``); ``None``: the server's own page.

    Returns:
        The names in the order the pages give them (each name once).

    Raises:
        RuntimeError: the database answered a page token it had already given (a listing that
            would never end), naming the token.
        Exception: the connection's own error for a database that cannot be listed.
    """
    names: list[str] = []
    seen: set[str] = set()
    seen_tokens: set[str] = set()
    token: str | None = None
    while True:
        page = db.list_tables(page_token=token, limit=page_size)
        for name in page.tables:
            if name not in seen:
                seen.add(name)
                names.append(name)
        token = page.page_token
        if not token:
            return names
        if token in seen_tokens:
            raise RuntimeError(f"LanceDB list_tables repeated the page token {token!r}: the listing would not end")
        seen_tokens.add(token)


def has_table(db: Any, name: str) -> bool:
    """Whether the LanceDB connection ``db`` holds a table ``name`` (every page: :func:`table_names`)."""
    return name in table_names(db)
