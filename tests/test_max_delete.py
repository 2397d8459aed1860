"""The share of the known partitions one sync may remove at once (issue 40, 1): its values and its
boundary, hand-counted. The orchestrator paths that ask it are run in ``test_your_own_documents``
(Dagster, the CLI, the demo) and ``test_airflow`` (the list task)."""

from __future__ import annotations

import pytest

from latechunk_dagster.pipeline.removals import TooManyRemovalsError, check_removals, max_delete_share

KNOWN = ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("value", "share"), [(0.5, 0.5), ("50%", 0.5), ("0.25", 0.25), ("100%", 1.0), ("0", 0.0), (" 12.5% ", 0.125)]
)
def test_a_share_is_a_fraction_or_a_percentage(value: object, share: float) -> None:
    assert max_delete_share(value) == share  # type: ignore[arg-type]


def test_the_default_is_half_and_the_environment_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LATECHUNK_MAX_DELETE", raising=False)
    assert max_delete_share() == 0.5
    monkeypatch.setenv("LATECHUNK_MAX_DELETE", "75%")
    assert max_delete_share() == 0.75 and max_delete_share("10%") == 0.1  # one call's value wins
    monkeypatch.setenv("LATECHUNK_MAX_DELETE", "2")
    with pytest.raises(ValueError, match=r"LATECHUNK_MAX_DELETE must be a share .* got '2'"):
        max_delete_share()
    for bad in ("lots", "-1", "101%"):
        with pytest.raises(ValueError, match=r"max_delete must be a share"):
            max_delete_share(bad)


def test_half_of_the_partitions_may_go_more_is_refused_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LATECHUNK_MAX_DELETE", raising=False)
    check_removals(["c", "d"], KNOWN, how="X")  # 2 of 4: 50%, not more
    check_removals([], [], how="X")  # nothing known, nothing removed
    with pytest.raises(TooManyRemovalsError) as err:
        check_removals(["b", "c", "d"], KNOWN, how="run X")
    assert err.value.removed == ["b", "c", "d"] and err.value.known == 4 and err.value.limit == 0.5
    assert str(err.value).startswith(
        "refusing to remove 3 of 4 known partitions at once (75% > the limit of 50%): their shards are not in "
        "the store: 'b', 'c', 'd'. Nothing was added or removed."
    )
    assert str(err.value).endswith("remove them with run X (or LATECHUNK_MAX_DELETE=100%)")
    with pytest.raises(TooManyRemovalsError, match=r"1 of 1 known"):
        check_removals(["a"], ["a"], how="X")  # a whole store, even of one shard
    check_removals(["b", "c", "d"], KNOWN, "100%", how="X")  # told
    with pytest.raises(TooManyRemovalsError, match=r"1 of 4 known partitions at once \(25% > the limit of 0%\)"):
        check_removals(["a"], KNOWN, 0, how="X")


def test_a_refusal_names_at_most_twenty_partitions() -> None:
    known = [f"s{i:03d}" for i in range(30)]
    with pytest.raises(TooManyRemovalsError) as err:
        check_removals(known, known, how="X")
    assert "'s019' and 10 more." in str(err.value) and "'s020'" not in str(err.value)
