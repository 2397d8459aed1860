"""The Dagster integration: resources, the asset factory and its translator, checks, sensor, component."""
