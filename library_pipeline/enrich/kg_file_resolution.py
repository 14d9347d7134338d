"""Person names resolved within one file, once the whole file is extracted.

A novel names a person many ways: "Sherlock Holmes" (20 mentions in the Holmes
stories), "Holmes" (436), "Mr. Holmes"; «Петр Андреевич Гринев», «Петр Андреич»,
«Гринев». Forms of address are stripped at extraction; what is left is merged
here, once the whole file is extracted: a shorter person name whose words are
an ordered part of exactly one longer person name of the same file becomes an
alias of it. A word shared by several full names («Гринев»: the narrator and his
father) is ambiguous: its mentions in this file are dropped rather than given
to either man, and a lookup of it answers with the candidates.

kg_store calls `resolve_within_file` in the transaction that writes a file's last batch.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from library_pipeline.enrich.gender import GENDERED_FORMS, first_name_gender, name_gender
from library_pipeline.enrich.gender import compatible as gender_compatible

# a short name said this many times as often as all the full names it could extend
# together is not made ambiguous by them ("McCarthy" 30 beside James 6 and Charles 1
# is; «Гринёв» 19 beside the father's and the son's full names, 2 and 3, is)
RARE_FULL_NAMES = 20
# the most mentions a full name said once can claim (see plan_file_merges)
ONE_OFF_CLAIMS = 100
_MARITAL = {"miss": "f-unmarried", "mlle": "f-unmarried", "mrs": "f-married", "mme": "f-married",
            "madame": "f-married"}
_PATRONYMIC = re.compile(r"(?:ович|евич|ич|ыч)$")


# Russian diminutives of first names: natasha tags «Маша» and «Петруша» as names but links
# them to nothing, and pymorphy3 lemmatises them to themselves. In «Капитанская дочка»
# «Маша» (37 mentions) stood apart from «Марья Ивановна» (157), «Петруша» (11) from Пётр
# Андреевич Гринёв. Only unambiguous diminutives of common first names.
DIMINUTIVES = {
    "маша": "марья", "машенька": "марья", "маня": "марья", "мария": "марья", "петруша": "петр", "петя": "петр",
    "петенька": "петр", "петрушка": "петр", "емелька": "емельян", "ваня": "иван", "ванюша": "иван",
    "алеша": "алексей", "алешка": "алексей", "саша": "александр", "сашенька": "александр", "коля": "николай",
    "митя": "дмитрий", "дмитрий": "дмитрий", "володя": "владимир", "наташа": "наталья", "катя": "екатерина",
    "катенька": "екатерина", "аня": "анна", "аннушка": "анна", "дуня": "авдотья", "дуняша": "авдотья",
    "палашка": "пелагея", "палаша": "пелагея", "андрюша": "андрей", "федя": "федор", "гриша": "григорий",
    "миша": "михаил", "сережа": "сергей", "лиза": "елизавета", "соня": "софья", "таня": "татьяна",
}


# A person's name common enough to name different people in different works («Иван
# Иваныч», a bare «Фома», "Holmes") is one entity within its work only: its normalised
# name carries the work (" @<document id>"; the separator is one kg_normalise_name never
# leaves, so a looked-up name cannot collide with it). A name with a surname beside a
# first name or initial («Пётр Андреевич Гринёв», "Sherlock Holmes") is one person
# wherever it is written.
SCOPE_MARK = " @"


def scoped_name(name_norm: str, document_id: int) -> str:
    return f"{name_norm}{SCOPE_MARK}{document_id}"


def name_scope(name_norm: str) -> tuple[str, int | None]:
    """(the name without its work, the work's document id or None)."""
    base, mark, doc = name_norm.rpartition(SCOPE_MARK)
    return (base, int(doc)) if mark and doc.isdigit() else (name_norm, None)


def _word_key(word: str) -> str:
    """Colloquial and full Russian patronymics compare equal: «андреич» ~
    «андреевич», «иваныч» ~ «иванович», «кузмич» ~ «кузьмич»; a diminutive is its
    full first name («маша» ~ «марья»)."""
    if word in DIMINUTIVES:
        return DIMINUTIVES[word]
    # the old spelling: «Петр Феодорович» and «Петр Федорович» are one man
    word = re.sub(r"^феодор", "федор", word)
    if len(word) > 5 and re.search(r"[а-я]", word):
        stem = _PATRONYMIC.sub("", word)
        if stem != word:
            return stem.rstrip("еоь").replace("ь", "") + "~"
    return word


def _ordered_part(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    if len(short) >= len(long):
        return False
    it = iter(long)
    return all(word in it for word in short)


_FEMALE_PATRONYMIC = re.compile(r"(?:овна|евна|ична|инична)$")


def _patronymic_stem(word: str) -> str | None:
    """The father's name a Russian patronymic is made of («ивановна», «иваныч» ->
    «иван»), None for another word."""
    for ending in ("овна", "евна", "ович", "евич", "ыч", "ична", "ич"):
        if len(word) > len(ending) + 2 and word.endswith(ending):
            return word[: -len(ending)]
    return None


def _first_name_pairs(names: dict[str, int], keys: dict[str, tuple], gender: dict[str, str | None],
                      merges: dict[str, str], ambiguous: dict[str, list[str]]) -> None:
    """First name and patronymic, and first name and surname, of one person in a Russian
    novel: «Марья Ивановна» (158 mentions) and «Марья Миронова» (2, «Маша Миронова» 1)
    never meet in one name. When the file says a first name with exactly one patronymic
    and exactly one surname, the two are one person and the rarer joins the commoner;
    a first name said with two patronymics («Иван Кузмич», «Иван Игнатьич») or two
    surnames stays apart. A second word made of the patronymic's father's name is the
    patronymic said the old way or lemmatised wrong («Марья Иванова», «Марья Ивановная»),
    not a surname."""
    groups: dict[str, dict[str, set[str]]] = defaultdict(lambda: {"patronymic": set(), "surname": set()})
    for n in names:
        if n in merges or n in ambiguous or len(keys[n]) != 2 or not re.fullmatch(r"[а-я ]+", n):
            continue
        groups[keys[n][0]]["patronymic" if _patronymic_stem(n.split()[-1]) else "surname"].add(n)
    for group in groups.values():
        stems = {_patronymic_stem(p.split()[-1]) for p in group["patronymic"]}
        old_style = {s for s in group["surname"] if any(s.split()[-1].startswith(t) for t in stems if t)}
        patronymic_keys = {keys[p][1] for p in group["patronymic"]}
        surnames = group["surname"] - old_style
        if len(patronymic_keys) != 1 or len(surnames) != 1:
            continue
        (surname,) = surnames
        patronymic = max(group["patronymic"], key=lambda p: (names[p], p))
        if not gender_compatible(gender[surname], gender[patronymic]):
            continue
        rare, common = sorted((surname, patronymic), key=lambda m: (names[m], m))
        merges[rare] = common
        for m in old_style:
            merges[m] = common


def plan_file_merges(names: dict[str, int]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Person names of one file (normalised name -> mentions in the file) ->
    ({name: the name it merges into}, {ambiguous name: candidate full names}).
    Names with the same words (patronymic forms and forms of address aside) merge
    into the most mentioned one; a full name mentioned once does not compete with
    one mentioned five times or more (a tagger's one-off like "Holmes Watson").
    A name never merges into one of the other gender ("Miss Turner" is not "John
    Turner"; see gender.py for where gender comes from)."""
    gender = {n: name_gender(n) for n in names}
    # initials and gendered forms of address do not make a name longer:
    # «а и швабрин» is «швабрин», "mr sherlock holmes" is "sherlock holmes"
    keys = {n: tuple(_word_key(w) for w in n.split() if len(w) > 1 and w not in GENDERED_FORMS) or (n,)
            for n in names}
    # a lone Russian surname in an oblique case the lemmatiser did not know («Швабрина»,
    # 34 mentions beside «Швабрин», 68) is the name said at least as often without the
    # ending; only lone names: inside a full name («Марья Миронова») the ending is hers
    for n in names:
        if re.fullmatch(r"[а-я]{4,}", n):
            stem = next((n[:-len(e)] for e in ("ым", "ом", "а", "у", "е") if n.endswith(e)
                         and n[:-len(e)] in names and names[n[:-len(e)]] >= names[n]), None)
            if stem:
                keys[n] = keys[stem]
            # a surname cut short as a nickname: «Пугач» (2) is «Пугачёв» (197); not a first
            # name («Иван» beside an «Иванов») and only beside a surname said ten times as often
            full = next((n + e for e in ("ев", "ов", "ин") if names.get(n + e, 0) >= 10 * names[n]), None)
            if full and first_name_gender(n) is None and not _patronymic_stem(n):
                keys[n] = keys[full]
    merges: dict[str, str] = {}
    ambiguous: dict[str, list[str]] = {}
    # same words, same gender (or none told): one class, named by its most mentioned name
    # ("Mrs. Turner", the landlady, is not "Miss Turner", the daughter: a wife's and a
    # daughter's form are two classes)
    form = {n: _MARITAL.get(n.split()[0]) if n.split() else None for n in names}
    canonical: dict[tuple, str] = {}
    for n in sorted(names, key=lambda n: (-names[n], n)):
        canonical.setdefault((keys[n], gender[n]), n)
    for n in names:
        head = canonical[(keys[n], gender[n])]
        if head != n and not (form[n] and form[head] and form[n] != form[head]):
            merges[n] = head
    heads = [n for n in names if n not in merges]
    # a gendered name ("Mrs. Hudson", "Mr. Sherlock Holmes") joins the same words said
    # without a form when the file says those words with one gender only; where that
    # name then goes is checked by the guard below ("Miss Turner" stays out of "John
    # Turner" even though "Turner" is his)
    for n in heads:
        if gender[n] is None:
            continue
        plain = canonical.get((keys[n], None))
        told = {form[m] or gender[m] for m in names if keys[m] == keys[n]} - {None}
        if plain is not None and len(told) == 1:
            merges[n] = plain
    heads = [n for n in heads if n not in merges]
    # words said with a man's and a woman's form, or a wife's and a daughter's ("Mrs." and
    # "Miss"), in this file: a family's surname, two people at least
    told_by_key: dict[tuple, set] = defaultdict(set)
    for m in names:
        if gender[m] is not None and m.split()[0] in GENDERED_FORMS:
            told_by_key[keys[m]].add(_MARITAL.get(m.split()[0], gender[m]))
    family = {k for k, told in told_by_key.items() if len(told) > 1}
    for n in heads:
        # a possessive phrase ("Alice's Right Foot", normalised "alice s right foot") is no name
        longer = [m for m in heads if _ordered_part(keys[n], keys[m]) and "s" not in m.split()
                  and gender_compatible(gender[n], gender[m])]
        if not longer:
            continue
        maximal = [m for m in longer if not any(_ordered_part(keys[m], keys[o]) for o in longer)]
        # a tagger's one-off beside a real full name does not make a name shared:
        # "Sometimes Holmes" (2) beside "Sherlock Holmes" (20) had "Holmes" (436)
        # dropped as ambiguous; "Mary Holder" (1) beside "Mary Sutherland" (6) still counts.
        # A full name weighs with the shorter names only it extends: «Петр Андреевич
        # Гринев» is said 3 times but «Петр Андреич» 67, and «Петруша» (11) had been left
        # ambiguous between him and five passing Петры said once each
        weight = {m: names[m] + sum(names[h] for h in longer if _ordered_part(keys[h], keys[m])
                                    and not any(_ordered_part(keys[h], keys[o]) for o in maximal if o != m))
                  for m in maximal}
        top = max(weight.values())
        maximal = [m for m in maximal if weight[m] * 8 >= top]
        if len(maximal) > 1 and names[n] >= RARE_FULL_NAMES * sum(names[m] for m in maximal):
            # full names this rare beside the short one are variants said in passing, not
            # rivals: «Пугачёв» (156 mentions in «Капитанская дочка») beside «Емельян
            # Пугачёв» (2) and «Емелька Пугачёв» (1) was dropped as ambiguous. The short
            # name stays an entity of its own; the full names keep theirs.
            continue
        if len(maximal) > 1:
            ambiguous[n] = sorted(maximal, key=lambda m: (-names[m], m))
        # a full name said once claims its short forms ("Victor Frankenstein" once, "Victor"
        # 27 times and "Frankenstein" 27 in a held-back novel: one man split in two) unless
        # the short name is a family's, said with two forms of address in this file: "Alice
        # Rucastle" (1 mention) took "Rucastle" (30), her father, and "Mrs. Rucastle" (15),
        # her mother, beside "Mr.", "Mrs." and "Miss Rucastle"
        # and unless the short name is said hundreds of times (the book's own "Alice", 387,
        # beside a passing "Alice Rucastle")
        # A lone patronymic names one man however often it is said: «Савельич» (122) is
        # «Архип Савельич», said once
        elif names[maximal[0]] > 1 or names[n] < 5 or (keys[n] not in family and names[n] < ONE_OFF_CLAIMS) \
                or (len(keys[n]) == 1 and keys[n][0].endswith("~")):
            merges[n] = maximal[0]
    _first_name_pairs(names, keys, gender, merges, ambiguous)

    def final(n: str) -> str:
        seen = {n}
        while n in merges and merges[n] not in seen:
            n = merges[n]
            seen.add(n)
        return n

    for n in list(merges):
        merges[n] = final(n)
    for n in ambiguous:
        merges.pop(n, None)
    for n, target in list(merges.items()):
        # the plain name is ambiguous (its mentions are dropped): a gendered name that
        # joined it picks the one full name of its gender, or is ambiguous among them
        if target in ambiguous:
            merges.pop(n)
            fits = [m for m in ambiguous[target] if gender_compatible(gender[n], gender[m])]
            if len(fits) == 1:
                merges[n] = fits[0]
            elif fits:
                ambiguous[n] = fits
    # last guard: no entity ends with names of both genders; a target that tells none
    # takes the gender said most often of the names merged into it
    said: dict[str, Counter] = defaultdict(Counter)
    for n, target in merges.items():
        if gender[n] is not None:
            said[target][gender[n]] += names[n]
    for n, target in list(merges.items()):
        told = gender[target] or (max(sorted(said[target]), key=lambda g: said[target][g]) if said[target] else None)
        if not gender_compatible(gender[n], told):
            merges.pop(n)
    return merges, ambiguous


def resolve_within_file(conn, document_id: int) -> tuple[int, int]:
    """Apply plan_file_merges to this file's person entities. Returns (merged, ambiguous)."""
    rows = conn.execute(
        "SELECT e.id, e.name, e.name_norm, s.mentions FROM entity_sources s JOIN entities e ON e.id = s.entity_id "
        "WHERE s.document_id = %s AND e.type = 'person'", (document_id,)).fetchall()
    # names held within this work carry its mark (name_scope); they are merged by the name
    by_norm = {name_scope(r[2])[0]: (r[0], r[1], r[3]) for r in rows}
    merges, ambiguous = plan_file_merges({n: v[2] for n, v in by_norm.items()})
    conn.execute("DELETE FROM entity_alias_candidates WHERE document_id = %s", (document_id,))
    for short, full in merges.items():
        _move_contributions(conn, document_id, by_norm[short][0], by_norm[full][0], by_norm[short][1])
    def final(name: str) -> str:
        # a candidate that was itself merged into a longer name stands for that name now (its
        # entity is gone): at a hundred books «Иван Иваныч» was both a candidate of «Иван» and
        # merged into a longer name, and the candidate row pointed at a deleted entity
        seen = set()
        while name in merges and name not in seen:
            seen.add(name)
            name = merges[name]
        return name

    for short, fulls in ambiguous.items():
        _move_contributions(conn, document_id, by_norm[short][0], None, by_norm[short][1])
        targets = sorted({by_norm[final(f)][0] for f in fulls if final(f) not in ambiguous})
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO entity_alias_candidates (alias_norm, entity_id, document_id) "
                            "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                            [(short, target, document_id) for target in targets])
    return len(merges), len(ambiguous)


def _move_contributions(conn, document_id: int, source: int, target: int | None, alias: str) -> None:
    """Give `source`'s mentions and edges in this file to `target` (None: drop them);
    `source` is deleted once no file mentions it, its name then an alias of `target`."""
    moved = conn.execute("DELETE FROM entity_sources WHERE entity_id = %s AND document_id = %s RETURNING mentions",
                         (source, document_id)).fetchone()
    count = moved[0] if moved else 0
    if target is not None:
        conn.execute(
            "INSERT INTO relations (source_id, target_id, relation, relation_raw, document_id, count, evidence, "
            "extractor) SELECT s, t, relation, relation_raw, document_id, count, evidence, extractor FROM ("
            "  SELECT CASE WHEN extractor = 'cooccurrence' THEN least(a, b) ELSE a END AS s,"
            "         CASE WHEN extractor = 'cooccurrence' THEN greatest(a, b) ELSE b END AS t, r.* FROM ("
            "    SELECT CASE WHEN source_id = %(src)s THEN %(dst)s ELSE source_id END AS a,"
            "           CASE WHEN target_id = %(src)s THEN %(dst)s ELSE target_id END AS b, relation, relation_raw,"
            "           document_id, count, evidence, extractor FROM relations"
            "    WHERE document_id = %(doc)s AND (source_id = %(src)s OR target_id = %(src)s)) r) m WHERE s <> t "
            "ON CONFLICT (source_id, target_id, relation, relation_raw, document_id) "
            # co-occurrence counts distinct sentences (kg_store.write_graph): two rows of a
            # pair first seen in one sentence ("Holmes" and "Sherlock Holmes" beside
            # "Watson") merge into one row that counts the sentence once
            "DO UPDATE SET count = relations.count + EXCLUDED.count - CASE WHEN relations.extractor = "
            "'cooccurrence' AND relations.evidence = EXCLUDED.evidence THEN 1 ELSE 0 END",
            {"src": source, "dst": target, "doc": document_id})
        conn.execute("INSERT INTO entity_sources (entity_id, document_id, mentions) VALUES (%s, %s, %s) "
                     "ON CONFLICT (entity_id, document_id) DO UPDATE SET mentions = entity_sources.mentions + "
                     "EXCLUDED.mentions", (target, document_id, count))
        conn.execute("UPDATE entities SET mentions = mentions + %s, updated_at = now() WHERE id = %s",
                     (count, target))
    conn.execute("DELETE FROM relations WHERE document_id = %s AND (source_id = %s OR target_id = %s)",
                 (document_id, source, source))
    conn.execute("UPDATE entities SET mentions = greatest(0, mentions - %s) WHERE id = %s", (count, source))
    orphan = conn.execute("DELETE FROM entities e WHERE id = %s AND NOT EXISTS (SELECT 1 FROM entity_sources s "
                          "WHERE s.entity_id = e.id) RETURNING name_norm", (source,)).fetchone()
    if orphan and target is not None:
        conn.execute("INSERT INTO entity_aliases (alias_norm, entity_id, alias) VALUES (%s, %s, %s) "
                     "ON CONFLICT (alias_norm) DO NOTHING", (orphan[0], target, alias))
