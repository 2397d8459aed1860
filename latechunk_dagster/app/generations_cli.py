"""``latechunk generations``, ``latechunk promote``, ``latechunk rollback``: a table definition's
generations (:mod:`latechunk_dagster.sink.generations`) from the command line.

    latechunk generations [--table T] [--enable] [--clean [--retention-days D]]
    latechunk promote [GENERATION] [--table T] [--force]   # the newest by default; gated
    latechunk rollback [--table T]
"""

from __future__ import annotations

import argparse

COMMANDS = ("generations", "promote", "rollback")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The three subcommands, each with ``--uri`` and ``--table``."""
    g = sub.add_parser("generations", help="list the generations of a table definition (which one readers are served)")
    g.add_argument("--enable", action="store_true", help="put the table definition under generations")
    g.add_argument("--clean", action="store_true", help="drop generations past the retention period (tagged kept)")
    g.add_argument(
        "--retention-days",
        type=float,
        default=None,
        help="retention of --clean (default $LATECHUNK_GENERATION_RETENTION_DAYS or 7)",
    )
    p = sub.add_parser("promote", help="serve the newest (or the given) generation: one commit")
    p.add_argument("generation", nargs="?", type=int, default=None)
    p.add_argument(
        "--force", action="store_true", help="promote although it lacks partitions the current generation has"
    )
    r = sub.add_parser("rollback", help="serve the generation current before the last promotion again: one commit")
    for q in (g, p, r):
        q.add_argument("--uri", default=None, help="LanceDB directory (default: $LATECHUNK_HOME/lancedb)")
        q.add_argument("--table", default=None, help="table definition (default: chunks)")
        q.add_argument("--rejected-table", default=None, help="its rejected table (default: rejected_documents)")


def run(args: argparse.Namespace) -> int:
    """Run one of :data:`COMMANDS`; prints one line per generation, or what changed.

    Raises:
        ValueError: the definition is not under generations (but for ``--enable``), no generation to
            promote or roll back to, or ``promote`` of a generation that lacks partitions (without ``--force``).
    """
    from latechunk_dagster import sink
    from latechunk_dagster.app import settings
    from latechunk_dagster.sink import generations as gens

    uri = args.uri or settings.lancedb_uri()
    table = args.table or sink.CHUNK_TABLE
    db = sink.connect(uri)
    if args.command == "promote":
        done = gens.promote(db, table, args.generation, force=args.force, note="latechunk promote", log_line=print)
        print(f"{table}: generation {done.number} ({done.table}) is current")
        print(f"{table}: dropped generations past the retention: {gens.clean(db, table) or 'none'}")
        return 0
    if args.command == "rollback":
        done = gens.rollback(db, table, note="latechunk rollback", log_line=print)
        print(f"{table}: rolled back, generation {done.number} ({done.table}) is current")
        return 0
    if args.enable:
        gens.enable_generations(db, table, args.rejected_table or sink.REJECTED_TABLE)
    if args.clean:
        dropped = gens.clean(db, table, retention=gens.retention_period(args.retention_days))
        print(f"{table}: dropped generations {dropped or 'none'}")
    state = gens.read_state(db, table)
    if state is None:
        print(f"{table}: not under generations (latechunk generations --enable)")
        return 0
    current = state.current.number if state.current else None
    print("generation\tstate\tkey\ttable\topened_at\tserved_until")
    for g in state.generations.values():
        status = "dropped" if g.dropped else "current" if g.number == current else "built" if g.promoted else "new"
        until = g.served_until.isoformat(timespec="seconds") if g.served_until else ""
        print(f"{g.number}\t{status}\t{g.key}\t{g.table}\t{g.opened_at.isoformat(timespec='seconds')}\t{until}")
    return 0
