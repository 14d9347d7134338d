"""How runs start. Below the code location: `plans` (what changed, turned into a run
plan, and how a plan becomes run requests or in-process runs of a job it is given) and
`run_plan` (lanes, the run queue, partition ranges). Above it, the in-process callers
that take their jobs from `library_pipeline.definitions`: `ingest_runner`,
`vault_runner`, and `celery_ingest` (the celery executor's code location and launcher)."""
