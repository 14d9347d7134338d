"""Retrieval evaluation: a BEIR harness that scores the serving search itself
(library_pipeline.eval.harness), the fixed regression query set for the
example library (library_pipeline.eval.regression, queries/), pooled
judgments for queries without gold (library_pipeline.eval.judge), and the
CLI (library_pipeline.eval.cli, `library eval ...`)."""
