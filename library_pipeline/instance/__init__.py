"""The Dagster instance of a library: its home (`home`: dagster.yaml, the run queue,
opening the instance in this process or a child) and its PostgreSQL storage
(`storage`)."""
