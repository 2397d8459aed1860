"""Where documents come from: file stores (text trees, JSONL, Parquet). Dagster-free."""
