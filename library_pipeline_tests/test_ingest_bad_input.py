"""Bad input fails alone, with a readable reason in `status` and in the
run's metadata; good files beside it land; nothing stored earlier is hurt."""

from __future__ import annotations

import json
import shutil
import zipfile

import dagster as dg
import pymupdf
import pytest
from typer.testing import CliRunner

from library_pipeline.cli.main import app
from library_pipeline.defs.ingest.partitions import partition_key_for
from library_pipeline.ingest.store import chunk_step, embed_step, extract_step, register_files
from library_pipeline_tests.conftest import SAMPLE_LIBRARY
from library_pipeline_tests.ingest_helpers import doc_rows, ingest, latest_metadata, write

GOOD_TEXT = "\n\n".join(f"Section {i}: the tide tables of the northern harbour list high water at dawn." * 3
                        for i in range(6))


@pytest.fixture()
def instance():
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def _pdf_bytes(text: str, **save) -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), text)
    data = doc.tobytes(**save)
    doc.close()
    return data


@pytest.fixture()
def hostile_library(make_db, tmp_path):
    db = make_db()
    lib = db.settings.library_dir
    write(lib / "good one.txt", GOOD_TEXT)
    shutil.copyfile(SAMPLE_LIBRARY / "Carroll - Alice's Adventures in Wonderland.epub",
                    lib / "Alice, [illustrated] \"first\" ed. — Алиса.epub")
    write(lib / "empty.txt", b"")
    write(lib / "corrupt.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage garbage\n%%EOF")
    pdf = _pdf_bytes("the tide tables")
    write(lib / "truncated.pdf", pdf[: len(pdf) // 3])
    write(lib / "encrypted.pdf", _pdf_bytes("secret tide tables", encryption=pymupdf.PDF_ENCRYPT_AES_256,
                                            owner_pw="owner", user_pw="user"))
    write(lib / "broken.epub", b"PK\x03\x04 this is not really a zip archive")
    with zipfile.ZipFile(lib / "no-content.epub", "w") as z:
        z.writestr("mimetype", "application/epub+zip")
    write(lib / "cp1251.txt", ("Это текст в кодировке Windows-1251 о приливах в северной гавани. " * 20)
          .encode("cp1251"))
    write(lib / "binary.txt", bytes(range(256)) * 40)
    outside = write(tmp_path / "outside" / "secret.txt", "a file outside the library folder " * 10)
    (lib / "link-out.txt").symlink_to(outside)
    return db


EXPECTED_FAILURES = {
    "empty.txt": "empty",
    "corrupt.pdf": "pdf",
    "truncated.pdf": "pdf",
    "encrypted.pdf": "encrypted",
    "broken.epub": "epub",
    "no-content.epub": "epub",
    "binary.txt": "",
    "link-out.txt": "outside the library",
}


def test_bad_files_fail_alone_with_reasons(hostile_library, instance):
    db = hostile_library
    summary = ingest(db, instance)
    docs = doc_rows(db)
    for name, fragment in EXPECTED_FAILURES.items():
        assert docs[name]["status"] == "failed", (name, docs[name])
        reason = docs[name]["error"] or ""
        assert fragment.lower() in reason.lower(), (name, reason)
        assert "Traceback" not in reason and len(reason) < 400
    for good in ("good one.txt", "Alice, [illustrated] \"first\" ed. — Алиса.epub", "cp1251.txt"):
        assert docs[good]["status"] == "ingested" and docs[good]["passages"] > 0, docs[good]
    assert docs["cp1251.txt"]["language"] == "ru"
    assert summary["failed"] == len(EXPECTED_FAILURES)
    meta = latest_metadata(instance, "extracted_text")
    assert meta["failed"] == len(EXPECTED_FAILURES)
    assert "encrypted.pdf" in meta["failures"]
    # the secret outside the library was never read into the database
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pages WHERE text LIKE '%outside the library folder%'"
                            ).fetchone()[0] == 0


def test_status_json_reports_failures(hostile_library, instance, monkeypatch):
    db = hostile_library
    ingest(db, instance)
    monkeypatch.setenv("LIBRARY_DB_DSN", db.dsn)
    monkeypatch.setenv("LIBRARY_DIR", str(db.settings.library_dir))
    monkeypatch.setenv("LIBRARY_HOME", str(db.settings.home))
    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    by_path = {d["path"]: d for d in data["documents"]}
    assert set(by_path["encrypted.pdf"]) >= {"path", "status", "pages", "ocr_pages", "passages", "error"}
    assert by_path["encrypted.pdf"]["status"] == "failed" and by_path["encrypted.pdf"]["error"]
    assert data["totals"]["failed"] == len(EXPECTED_FAILURES)
    assert data["totals"]["ingested"] == 3


def test_corrupt_new_version_keeps_old_passages(make_db, instance):
    db = make_db()
    path = write(db.settings.library_dir / "report.pdf", _pdf_bytes("the lighthouse keeper's annual report"))
    ingest(db, instance)
    before = doc_rows(db)["report.pdf"]
    assert before["status"] == "ingested" and before["passages"] > 0
    path.write_bytes(b"%PDF-1.4 corrupted on a later sync")
    ingest(db, instance)
    after = doc_rows(db)["report.pdf"]
    assert after["status"] == "failed" and after["error"]
    assert after["passages"] == before["passages"]  # still searchable


def test_file_vanishing_mid_run(make_db, embedder):
    db = make_db()
    path = write(db.settings.library_dir / "ephemeral.txt", GOOD_TEXT)
    register_files(db, {"ephemeral.txt": path})
    path.unlink()
    key = partition_key_for("ephemeral.txt")
    result = extract_step(db, db.settings.library_dir, key)
    assert result.status == "failed" and "not found" in result.reason
    assert chunk_step(db, key, embedder).status == "skipped"
    assert embed_step(db, key, embedder).status == "skipped"
    assert doc_rows(db)["ephemeral.txt"]["error"].startswith("file not found")


def test_oversized_file_refused(make_db, instance):
    db = make_db(max_file_bytes=1024)
    write(db.settings.library_dir / "big.txt", "x " * 4096)
    write(db.settings.library_dir / "small.txt", "a small file about tides and harbours.")
    ingest(db, instance)
    docs = doc_rows(db)
    assert docs["big.txt"]["status"] == "failed" and "large" in docs["big.txt"]["error"].lower()
    assert docs["small.txt"]["status"] == "ingested"


def test_single_file_run_fails_visibly(make_db, instance):
    """A run of one bad partition fails in Dagster (red in the UI) with the reason."""
    db = make_db()
    write(db.settings.library_dir / "empty.txt", b"")
    summary = ingest(db, instance)
    assert summary["failed_runs"], "a single-file run of a bad file must fail"
    run = instance.get_run_by_id(summary["failed_runs"][0])
    assert run.status == dg.DagsterRunStatus.FAILURE
    failures = [e for e in instance.all_logs(run.run_id) if e.dagster_event and e.dagster_event.is_step_failure]
    assert any("empty" in str(e.dagster_event.event_specific_data.error.message).lower() for e in failures)
