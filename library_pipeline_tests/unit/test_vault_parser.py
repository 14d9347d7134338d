"""The Obsidian note parser on real notes from both test vaults and on edge cases."""

from __future__ import annotations

import pytest

from library_pipeline.vault.parser import Link, NoteError, parse_note, split_subsections
from library_pipeline.vault.sync import is_note

NOTE = """---
title: Field Notes
tags:
  - biology
  - "#field/work"
aliases: [FN, Notes from the field]
status: draft
related: "[[Tide Tables#Spring tides|spring tides]]"
people:
  - "[[Ада Лавлейс]]"
---
Intro paragraph with a #inline-tag and a link to [[Harbour]].

# Field Notes

## Morning

Saw [[Birds/Gull|gulls]] and ![[gull photo.png]]. Issue #12 is not a tag.

> [!warning]- Careful
> The rocks are slippery, see [[#Evening]].

```python
## not a heading
x = "[[not a link]]"  # and #not-a-tag
```

Inline code `[[also not a link]]` stays code.

## Evening

### Stars

Orion rose at nine.
"""


def test_front_matter_sections_links_tags_callouts():
    note = parse_note(NOTE, "Journal/field notes.md")
    assert note.title == "Field Notes"
    assert note.front_matter["status"] == "draft"
    assert note.aliases == ["FN", "Notes from the field"]
    assert note.tags == ["biology", "field/work", "inline-tag"]
    assert [(s.heading, s.level) for s in note.sections] == [(None, 0), ("Morning", 2), ("Evening", 2)]
    preamble = note.sections[0].text
    assert preamble.startswith("title: Field Notes") and "Intro paragraph" in preamble  # properties + intro
    assert "## not a heading" in note.sections[1].text  # code stays inside its section
    assert "### Stars" in note.sections[2].text          # deeper headings stay in their section
    assert note.sections[1].line_start > 10              # line numbers count the front matter
    assert set(note.links) == {
        Link("Tide Tables", "spring tides", "Spring tides", "property", "related"),
        Link("Ада Лавлейс", None, None, "property", "people"),
        Link("Harbour"),
        Link("Birds/Gull", "gulls"),
        Link("gull photo.png", kind="embed"),
        Link("", None, "Evening"),
    }
    assert [(c.type, c.title, c.fold) for c in note.callouts] == [("warning", "Careful", "-")]
    assert note.warnings == []


def test_no_front_matter_and_title_from_file_name():
    note = parse_note("Just a line about [[Elsewhere]].\n", "Папка/Мысли о времени.md")
    assert note.title == "Мысли о времени" and note.front_matter == {}
    assert [s.heading for s in note.sections] == [None] and note.links == [Link("Elsewhere")]


def test_broken_yaml_is_kept_as_text_with_a_warning():
    note = parse_note("---\ncategories:\n  - \"[[Movies]]\"\nlast: {{date}}\n---\n## Plot\n\nA heist.\n", "m.md")
    assert note.front_matter == {}
    assert "not valid YAML" in note.warnings[0]
    assert "last: {{date}}" in note.sections[0].text      # nothing dropped
    assert Link("Movies", kind="property") in note.links  # links in the raw properties still count
    assert note.sections[1].heading == "Plot"


def test_binary_content_is_refused():
    with pytest.raises(NoteError, match="binary"):
        parse_note("PNG\x00\x01\x02", "x.md")


def test_long_section_splits_at_deeper_headings():
    note = parse_note("## Big\n\nintro\n\n### One\n\nfirst\n\n### Two\n\nsecond\n", "b.md")
    parts = split_subsections(note.sections[0])
    assert [h for h, _ in parts] == ["Big", "Big > One", "Big > Two"]
    assert parts[2][1].startswith("### Two")


def test_both_real_vaults_parse(test_data):
    root = test_data / "obsidian_vaults"
    totals = {"notes": 0, "sections": 0, "link": 0, "embed": 0, "property": 0, "broken_yaml": 0, "callouts": 0}
    for path in sorted([*root.glob("kepano_vault/**/*.md"), *root.glob("quartz_docs/**/*.md")]):
        if not is_note(path.relative_to(root).as_posix()):
            continue
        note = parse_note(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix())
        totals["notes"] += 1
        totals["sections"] += len(note.sections)
        totals["callouts"] += len(note.callouts)
        totals["broken_yaml"] += any("YAML" in w for w in note.warnings)
        for link in note.links:
            totals[link.kind] += 1
    assert totals["notes"] == 173, totals  # 70 + 103, as SOURCES.md counts them
    # SOURCES.md counts 439 `[[` occurrences, some inside code blocks (quartz documents its own syntax)
    assert 380 <= totals["link"] + totals["embed"] + totals["property"] <= 439
    assert totals["property"] > 50 and totals["embed"] > 50
    assert totals["callouts"] >= 60
    assert 0 < totals["broken_yaml"] < 40  # kepano templates' `{{date}}` placeholders
    kepano = parse_note((root / "kepano_vault/Categories/Books.md").read_text(), "Categories/Books.md")
    assert kepano.title == "Books"
