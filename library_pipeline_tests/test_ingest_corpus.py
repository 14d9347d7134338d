"""Ingest of the documents of library_pipeline_tests/data/documents plus the example
library's Cyrillic-named file, through the real assets, into the real embedded Postgres,
recorded in a Postgres-backed Dagster instance.

The example library's other four files are byte-identical copies of documents here; with
them the module's one ingest took 662 s of a 35-minute CI suite, for no path the copies
exercise beyond file names with spaces, which the Cyrillic name covers too.

Two whole books are cut down, because on a CPU without bf16 (MiniLM in fp32, ~14 texts/s
on two cores) the module's one ingest took 599 s of a 51-minute CI run, and Moby-Dick and
SICP were 54% of its passages. Moby-Dick is left out: Sherlock Holmes is the English EPUB
here, and test_chunking still extracts and chunks the whole of both books. SICP keeps its
front matter (Contents on pages 3-8), its last pages, and the two body pages that read like
a table of contents (249 and 479: is_toc_like holds there), so the check that only the
front matter makes toc passages still has something to reject."""

from __future__ import annotations

import difflib
import re
import shutil
from pathlib import Path

import dagster as dg
import pymupdf
import pytest

from library_pipeline.instance.home import prepare_dagster_home
from library_pipeline_tests.conftest import SAMPLE_LIBRARY, new_database
from library_pipeline_tests.ingest_helpers import doc_rows, ingest, latest_metadata

pytestmark = pytest.mark.timeout(2400)  # the module shares one ingest of several thousand passages

SCANNED = "documents/pdf_scanned/federal-register-2020-17221_rasterized-p1-3.pdf"
EXAMPLE = "Пушкин - Капитанская дочка.txt"
# the two Herzen texts serve the known-item tests (test_known_items.py); one Russian book is
# enough here
LEFT_OUT = {"pg2701-moby-dick.epub", "herzen_povrezhdennyi.txt", "herzen_dolg-prezhde-vsego.txt"}
SICP = "sicp-2nd-ed-sarabander.pdf"
SICP_HEAD, SICP_TOC_LIKE, SICP_TAIL = 60, (249, 479), 30  # pages kept; the middle two 1-based


def _sicp_cut(source: Path, target: Path) -> None:
    with pymupdf.open(source) as pdf:
        pdf.select([*range(SICP_HEAD), *(n - 1 for n in SICP_TOC_LIKE),
                    *range(pdf.page_count - SICP_TAIL, pdf.page_count)])
        pdf.save(target, garbage=3, deflate=True)


@pytest.fixture(scope="module")
def corpus(server_db, test_data, tmp_path_factory, monkeypatch_module):
    library = tmp_path_factory.mktemp("corpus_library")
    (library / "examples").mkdir(parents=True)
    shutil.copyfile(SAMPLE_LIBRARY / EXAMPLE, library / "examples" / EXAMPLE)
    for folder in ("epub", "pdf", "pdf_scanned", "text_ru"):
        for f in sorted((test_data / "documents" / folder).iterdir()):
            if (f.suffix in (".pdf", ".epub") or folder == "text_ru") and f.name not in LEFT_OUT:
                target = library / "documents" / folder / f.name
                target.parent.mkdir(parents=True, exist_ok=True)
                (_sicp_cut if f.name == SICP else shutil.copyfile)(f, target)
    db = new_database(server_db, library)
    monkeypatch_module.setenv("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster_home")))
    instance = prepare_dagster_home(db).instance()
    first = ingest(db, instance)
    return db, instance, first


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_every_document_lands(corpus):
    db, instance, first = corpus
    docs = doc_rows(db)
    assert first["files"] == 12, first  # 11 documents + 1 example
    assert first["failed"] == 0, first["failures"]
    assert all(d["status"] == "ingested" and d["passages"] > 0 for d in docs.values()), docs
    # the instance really is the Postgres-backed one, shared with the UI
    from dagster_postgres import PostgresRunStorage

    from library_pipeline.instance.storage import LibraryRunStorage

    assert isinstance(instance.run_storage, LibraryRunStorage)
    assert isinstance(instance.run_storage, PostgresRunStorage)
    assert instance.get_runs_count() == first["runs"] >= 1


def test_page_counts_match_pymupdf(corpus):
    db, _, _ = corpus
    docs = doc_rows(db)
    assert docs[f"documents/pdf/{SICP}"]["pages"] == SICP_HEAD + len(SICP_TOC_LIKE) + SICP_TAIL
    for folder in ("pdf", "pdf_scanned"):
        for f in (db.settings.library_dir / "documents" / folder).glob("*.pdf"):
            with pymupdf.open(f) as pdf:
                assert docs[f"documents/{folder}/{f.name}"]["pages"] == pdf.page_count


def test_toc_chunk_in_front_matter_only(corpus):
    db, _, _ = corpus
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT p.page_start, p.page_end, d.pages FROM passages p JOIN documents d ON d.id = p.document_id "
            "WHERE d.path = 'documents/pdf/sicp-2nd-ed-sarabander.pdf' AND p.kind = 'toc'").fetchall()
    assert rows, "SICP has a table of contents in its front matter"
    for start, end, pages in rows:
        assert end <= max(20, int(0.15 * pages)), (start, end)


def test_ocr_text_close_to_ground_truth(corpus, test_data):
    db, _, _ = corpus
    with db.connect() as conn:
        ocr_pages, pages = conn.execute("SELECT ocr_pages, pages FROM documents WHERE path = %s",
                                        (SCANNED,)).fetchone()
        text = "\n".join(r[0] for r in conn.execute(
            "SELECT p.text FROM pages p JOIN documents d ON d.id = p.document_id WHERE d.path = %s "
            "ORDER BY p.page_no", (SCANNED,)))
    assert ocr_pages == pages == 3
    truth = (test_data / SCANNED.replace(".pdf", ".groundtruth.txt")).read_text(encoding="utf-8")
    norm = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731
    ratio = difflib.SequenceMatcher(None, norm(text), norm(truth), autojunk=False).ratio()
    assert ratio >= 0.90, ratio


def test_russian_indexed_with_russian_configuration(corpus):
    db, _, _ = corpus
    docs = doc_rows(db)
    ru = docs["documents/text_ru/pushkin_kapitanskaya-dochka.txt"]
    assert (ru["language"], ru["ts_config"]) == ("ru", "russian")
    assert docs["documents/epub/pg1661-sherlock-holmes.epub"]["ts_config"] == "english"
    assert docs["documents/pdf/GeoTopo-komprimiert_de.pdf"]["ts_config"] == "german"
    with db.connect() as conn:
        # "капитанской" and "капитана" share the Russian stem only under the russian configuration
        hits = conn.execute(
            "SELECT count(*) FROM passages p JOIN documents d ON d.id = p.document_id "
            "WHERE d.path = %s AND p.ts_config = 'russian'::regconfig "
            "AND p.tsv @@ to_tsquery('russian', 'капитана')", (ru["path"],)).fetchone()[0]
    assert hits > 0


def test_passages_fit_the_embedder_window(corpus, embedder):
    """Every passage fits the window of the model that sized it: the primary one, or for a
    text in another script (the Russian novel) the multilingual one."""
    db, _, _ = corpus
    from serving.embedding import USEM3_NAME, chunk_counter, embed_text_for_passage

    with db.connect() as conn:
        rows = conn.execute("SELECT d.title, p.heading, p.content, d.language FROM passages p JOIN documents d "
                            "ON d.id = p.document_id ORDER BY random() LIMIT 400").fetchall()
    over = [r for r in rows
            if (m := chunk_counter(embedder, r[3])).count_tokens(embed_text_for_passage(*r[:3])) > m.max_tokens]
    assert not over, f"{len(over)} of {len(rows)} passages overflow their model's window"
    assert {chunk_counter(embedder, r[3]).name for r in rows} == {embedder.name, USEM3_NAME}


def test_second_ingest_reembeds_nothing(corpus):
    db, instance, _ = corpus
    with db.connect() as conn:
        before = conn.execute("SELECT count(*), max(id) FROM passages").fetchone()
    second = ingest(db, instance)
    assert second["failed"] == 0
    meta = latest_metadata(instance, "embeddings")
    assert meta["embedded"] == 0 and meta["skipped"] == second["files"]
    with db.connect() as conn:
        assert conn.execute("SELECT count(*), max(id) FROM passages").fetchone() == before


def test_metadata_reports_counts_timings_model(corpus):
    _, instance, _ = corpus
    runs = instance.get_runs(limit=50)
    first_run = runs[-1]
    events = instance.get_records_for_run(first_run.run_id).records
    mats = [e.event_log_entry.dagster_event.event_specific_data.materialization for e in events
            if e.event_log_entry.dagster_event and e.event_log_entry.dagster_event.is_step_materialization]
    by_asset = {m.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in m.metadata.items()}
                for m in mats}
    assert by_asset["extracted_text"]["ocr_pages"] >= 4  # 3 rasterised pages + the scanned Huck Finn page
    assert by_asset["embeddings"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert by_asset["embeddings"]["embedded"] > 1000
    assert by_asset["embeddings"]["seconds"] > 0
