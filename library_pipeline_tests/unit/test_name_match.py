"""The title lane's name matching looks closely only at the names one configuration could
pass its rule with; the documents it returns, their order and their terms must be those of
the rule applied to every name."""

from __future__ import annotations

import random

import pytest

from serving.search.titles import KEY_CONFIGS, SHORT_NAME, TRANSLIT, DocName, NameIndex, _postings

WORDS = [f"w{i}" for i in range(40)]
CONFIGS = ("english", "russian", TRANSLIT)


def _library(rng: random.Random, n: int) -> NameIndex:
    docs = []
    for i in range(n):
        lexemes = {c: frozenset(rng.sample(WORDS[:20] if c == TRANSLIT else WORDS, rng.randint(1, 7)))
                   for c in CONFIGS if rng.random() < 0.8}
        docs.append(DocName(id=i + 1, source="library", path=f"{rng.choice('abc')}/{i % 7}.txt", title=None,
                            format="txt", language=None, pages=None, status="ok", error=None,
                            lexemes=lexemes, flat=""))
    docs = tuple(docs)
    return NameIndex(("test",), docs, CONFIGS, _postings([d.lexemes for d in docs]))


def _by_the_rule(index: NameIndex, query: dict[str, set[str]], min_terms: int, min_share: float):
    """Every name against the rule, as `NameIndex.match` documents it."""
    out = []
    for doc in index.docs:
        shared = [(c, doc.lexemes.get(c, frozenset()) & q) for c, q in query.items()]
        shared = [(c, terms) for c, terms in shared if terms]
        if not shared:
            continue
        n, share, _, terms = max((len(t), len(t) / max(len(query[c]), 1), c not in KEY_CONFIGS, set(t))
                                 for c, t in shared)
        size = max((len(v) for v in doc.lexemes.values()), default=1)
        single = n == 1 and share >= 1.0 and size <= SHORT_NAME
        if (n >= max(min_terms, 1) or single) and share >= min_share:
            out.append((doc, n, sorted(terms), n / max(size, 1)))
    out.sort(key=lambda t: (-t[1], -t[3], t[0].path))
    return [(doc.id, n, terms) for doc, n, terms, _ in out]


@pytest.mark.parametrize("min_terms,min_share", [(2, 0.67), (1, 0.0), (2, 0.0), (3, 0.5), (0, 1.0)])
def test_match_is_the_rule_over_every_name(min_terms, min_share):
    rng = random.Random(min_terms * 100 + int(min_share * 10))
    index = _library(rng, 400)
    matched = 0
    for _ in range(300):
        query = {c: set(rng.sample(WORDS, rng.randint(1, 6))) for c in CONFIGS if rng.random() < 0.7}
        got = [(doc.id, n, terms) for doc, n, terms in index.match(query, min_terms, min_share)]
        assert got == _by_the_rule(index, query, min_terms, min_share), query
        matched += bool(got)
    assert matched > 30   # the queries exercise the rule, not only empty answers
