"""`python -m library_pipeline.cli …`: the `library` command."""

from library_pipeline.cli.main import app

app()
