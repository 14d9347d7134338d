"""Obsidian note parser: front matter, `##` sections, links, callouts, tags.

Front matter is read by `python-frontmatter` (PyYAML underneath) and the body
by `markdown-it-py`, so a `## heading` or a `[[link]]` inside a code fence or a
code span is not mistaken for structure. markdown-it has no wikilink syntax
(nor does mdit-py-plugins 0.7), so two small inline rules are registered for
`[[…]]` / `![[…]]` and `#tags`; they run inside markdown-it's own inline
scanner, which has already consumed code spans and escapes.

Broken YAML is real: kepano's templates carry `last: {{date}}` (a template
placeholder that YAML reads as a mapping used as a key, "unhashable key").
Such a note is still indexed: its body as usual and the raw front-matter text
as its properties section, with the YAML error kept as a warning. Nothing a
note says is dropped.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import frontmatter
import yaml
from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline

# Obsidian's forbidden link characters end a target; `|` starts the alias, `#` the heading
# (`#^` a block reference, kept as the heading with its caret).
_PROPERTY_LINK = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
_TAG_CHARS = re.compile(r"[\w/\-]+", re.UNICODE)
_CALLOUT = re.compile(r"^\[!([\w-]+)\]([+-]?)\s*(.*)$")


@dataclass(frozen=True)
class Link:
    target: str               # note name or path as written, without `.md`; '' for a same-note `[[#Heading]]`
    alias: str | None = None
    heading: str | None = None
    kind: str = "link"        # link | embed | property
    property: str | None = None  # front-matter key the link was written in


@dataclass(frozen=True)
class Callout:
    type: str
    title: str | None
    fold: str | None          # '+' | '-' | None


@dataclass
class Section:
    ordinal: int
    heading: str | None       # heading path, "H2 > H3" when a long section is split further
    level: int                # 0 preamble / properties, 2 for a `##` section
    text: str                 # the section's markdown, its heading line included
    line_start: int           # 0-based line in the note file
    line_end: int


@dataclass
class ParsedNote:
    title: str
    front_matter: dict[str, Any]
    properties_text: str      # front matter as readable `key: value` lines (or the raw YAML if broken)
    body: str
    sections: list[Section]
    links: list[Link]
    tags: list[str]
    aliases: list[str]
    callouts: list[Callout]
    warnings: list[str] = field(default_factory=list)


class NoteError(ValueError):
    """A readable reason a note cannot be indexed."""


# -- markdown-it inline rules -------------------------------------------------------

def _split_target(inner: str) -> tuple[str, str | None, str | None]:
    target, _, alias = inner.partition("|")
    target, hash_, heading = target.partition("#")
    target = target.strip()
    if target.lower().endswith(".md"):
        target = target[:-3]
    return target, (alias.strip() or None) if alias else None, (heading.strip() or None) if hash_ else None


def _wikilink_rule(state: StateInline, silent: bool) -> bool:
    pos, src = state.pos, state.src
    embed = src.startswith("![[", pos)
    if not embed and not src.startswith("[[", pos):
        return False
    start = pos + (3 if embed else 2)
    end = src.find("]]", start)
    if end < 0 or "\n" in src[start:end] or "[" in src[start:end] or end == start:
        return False
    if not silent:
        target, alias, heading = _split_target(src[start:end])
        token = state.push("wikilink", "", 0)
        token.meta = {"target": target, "alias": alias, "heading": heading, "embed": embed}
        token.content = alias or (f"{target}#{heading}" if heading and target else heading or target)
    state.pos = end + 2
    return True


def _tag_rule(state: StateInline, silent: bool) -> bool:
    pos, src = state.pos, state.src
    if src[pos] != "#" or (pos > 0 and not src[pos - 1].isspace() and src[pos - 1] not in "([,"):
        return False
    match = _TAG_CHARS.match(src, pos + 1)
    # Obsidian requires a non-numeric character: "#1" is an issue number, not a tag
    if not match or not any(not ch.isdigit() for ch in match.group(0)):
        return False
    if not silent:
        token = state.push("hashtag", "", 0)
        token.content = match.group(0)
    state.pos = match.end()
    return True


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    md.inline.ruler.before("link", "wikilink", _wikilink_rule)
    md.inline.ruler.before("link", "hashtag", _tag_rule)
    return md


# -- front matter ---------------------------------------------------------------------

def _jsonable(value: Any) -> Any:
    """YAML gives dates, sets and odd keys; the front_matter column is jsonb."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in re.split(r"[,\s]+", value) if v.strip()] if "," in value or " " in value \
            else [value.strip()] if value.strip() else []
    if isinstance(value, list):
        return [str(v).strip() for v in value if v is not None and str(v).strip()]
    return [str(value)]


def _render_properties(meta: dict[str, Any]) -> str:
    lines = []
    for key, value in meta.items():
        if value in (None, "", [], {}):
            continue
        if isinstance(value, list):
            value = ", ".join(json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else str(v)
                              for v in value)
        elif isinstance(value, dict):
            value = json.dumps(value, ensure_ascii=False)
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _property_links(meta: Any, key: str | None = None) -> list[Link]:
    out: list[Link] = []
    if isinstance(meta, dict):
        for k, v in meta.items():
            out += _property_links(v, str(k) if key is None else key)
    elif isinstance(meta, list):
        for v in meta:
            out += _property_links(v, key)
    elif isinstance(meta, str):
        for m in _PROPERTY_LINK.finditer(meta):
            target, alias, heading = _split_target(m.group(2))
            out.append(Link(target, alias, heading, "property", key))
    return out


_FM_BLOCK = re.compile(r"\A---[ \t]*\n(.*?\n)?---[ \t]*(\n|\Z)", re.DOTALL)


def _split_front_matter(text: str) -> tuple[dict[str, Any], str, str, int, list[str]]:
    """(metadata, properties text, body, line offset of the body, warnings)."""
    warnings: list[str] = []
    match = _FM_BLOCK.match(text)
    if not match:
        return {}, "", text, 0, warnings
    body, offset = text[match.end():], text.count("\n", 0, match.end())
    try:
        meta = _jsonable(dict(frontmatter.loads(text).metadata))
        return meta, _render_properties(meta), body, offset, warnings
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        first = " ".join(str(exc).split())[:300]
        warnings.append(f"front matter is not valid YAML ({first}); kept as text")
        return {}, (match.group(1) or "").strip(), body, offset, warnings


# -- the parse ------------------------------------------------------------------------

def _inline_children(tokens) -> list:
    out = []
    for tok in tokens:
        if tok.type == "inline" and tok.children:
            out.extend(tok.children)
    return out


def _callouts(tokens) -> list[Callout]:
    found = []
    for i, tok in enumerate(tokens):
        if tok.type != "blockquote_open":
            continue
        # the first inline of the quote: paragraph_open, inline
        for nxt in tokens[i + 1:i + 4]:
            if nxt.type == "inline":
                first = nxt.content.split("\n", 1)[0].strip()
                m = _CALLOUT.match(first)
                if m:
                    found.append(Callout(m.group(1).lower(), m.group(3).strip() or None, m.group(2) or None))
                break
    return found


def parse_note(text: str, path: str) -> ParsedNote:
    """Parse one note. `path` (relative, with `.md`) supplies the fallback title."""
    if "\x00" in text:
        raise NoteError("binary content, not a note (contains NUL bytes)")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    meta, properties_text, body, body_offset, warnings = _split_front_matter(text)

    tokens = _markdown().parse(body)
    lines = body.split("\n")
    children = _inline_children(tokens)

    # unparseable YAML still links where it says `[[…]]`
    links = _property_links(meta if meta else properties_text)
    for tok in children:
        if tok.type == "wikilink":
            m = tok.meta
            links.append(Link(m["target"], m["alias"], m["heading"], "embed" if m["embed"] else "link"))
    body_tags = [tok.content for tok in children if tok.type == "hashtag"]
    fm_tags = [t.lstrip("#") for t in _as_list(meta.get("tags") or meta.get("tag"))]
    tags = list(dict.fromkeys(fm_tags + body_tags))
    aliases = _as_list(meta.get("aliases") or meta.get("alias")) if not isinstance(meta.get("aliases"), str) \
        else [meta["aliases"]]

    # `##` headings split the note; text before the first one is a section of its own
    h1 = None
    cuts: list[tuple[int, str]] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            heading_text = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            if tok.tag == "h1" and h1 is None:
                h1 = heading_text
            elif tok.tag == "h2":
                cuts.append((tok.map[0], heading_text))
    title = str(meta.get("title") or "").strip() or _title_from_path(path)

    sections: list[Section] = []
    pre_end = cuts[0][0] if cuts else len(lines)
    preamble = "\n".join(lines[:pre_end]).strip()
    preamble_text = "\n\n".join(t for t in (properties_text, preamble) if t)
    if preamble_text:
        sections.append(Section(0, h1 if h1 and h1 != title else None, 0, preamble_text, 0, body_offset + pre_end))
    for n, (start, heading) in enumerate(cuts):
        end = cuts[n + 1][0] if n + 1 < len(cuts) else len(lines)
        content = "\n".join(lines[start:end]).strip()
        if content:
            sections.append(Section(len(sections), heading or None, 2, content,
                                    body_offset + start, body_offset + end))
    return ParsedNote(title=title, front_matter=meta, properties_text=properties_text, body=body,
                      sections=sections, links=links, tags=tags, aliases=aliases,
                      callouts=_callouts(tokens), warnings=warnings)


def _title_from_path(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name[:-3] if name.lower().endswith(".md") else name


def split_subsections(section: Section) -> list[tuple[str | None, str]]:
    """A long `##` section's parts at its deeper headings: (heading path, text).
    Used only when the whole section does not fit the embedder's window."""
    tokens = _markdown().parse(section.text)
    lines = section.text.split("\n")
    cuts = [(tok.map[0], tokens[i + 1].content.strip()) for i, tok in enumerate(tokens)
            if tok.type == "heading_open" and tok.map and tok.tag in ("h3", "h4", "h5", "h6") and tok.map[0] > 0]
    if not cuts:
        return [(section.heading, section.text)]
    parts = [(section.heading, "\n".join(lines[:cuts[0][0]]).strip())]
    for n, (start, heading) in enumerate(cuts):
        end = cuts[n + 1][0] if n + 1 < len(cuts) else len(lines)
        path = " > ".join(h for h in (section.heading, heading) if h) or None
        parts.append((path, "\n".join(lines[start:end]).strip()))
    return [(h, t) for h, t in parts if t]
