"""Migrations of a library's data: `embedder`, the resumable re-embed to another model
and the filling of the multilingual lane (its command line is library_pipeline.cli.migrate)."""
