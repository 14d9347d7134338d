"""The `library` command line: every command (`main` is the app; `up` the main job;
`graph`, `vault`, `migrate` their command groups). Each command builds `Settings` at its
start and passes them, or a `Database` over them, down; runs start through
`library_pipeline.launch`."""
