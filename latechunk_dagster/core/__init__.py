"""The Dagster-free core: one tokenization pass, strategies, windows, the mean, the head, engines.

Nothing under ``latechunk_dagster.core`` imports Dagster or LanceDB.
"""
