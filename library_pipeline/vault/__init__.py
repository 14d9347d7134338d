"""Obsidian vault sync: the note parser, git access and the per-note store."""
