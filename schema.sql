-- THE schema of library-pipeline. Applied idempotently at every start
-- (serving.db.ensure_schema), so every statement here must be re-runnable:
-- CREATE ... IF NOT EXISTS, CREATE OR REPLACE, ALTER ... ADD COLUMN IF NOT EXISTS.
-- The write side (library_pipeline) and the read side (serving) meet here and
-- nowhere else: anything both must agree on (the tsvector of a passage, entity
-- name normalisation) is a column definition or an SQL function in this file.

CREATE EXTENSION IF NOT EXISTS vector;

-- One row per source file. The inventory (library_files) answers from here,
-- never from search: a search always returns its closest guesses, only this
-- table can say "not here".
CREATE TABLE IF NOT EXISTS documents (
    id              bigserial PRIMARY KEY,
    source          text NOT NULL DEFAULT 'library' CHECK (source IN ('library', 'vault')),
    path            text NOT NULL,            -- relative to its root, real name (any characters)
    partition_key   text NOT NULL,            -- Dagster-safe key derived from path (library_pipeline.defs.ingest.partitions)
    title           text,
    format          text,                     -- pdf | epub | txt | md
    language        text,                     -- ISO 639-1 as detected, or NULL
    ts_config       regconfig NOT NULL DEFAULT 'simple',
    size_bytes      bigint,
    mtime           double precision,
    content_hash    text,                     -- sha256 of the file bytes last extracted
    indexed_hash    text,                     -- content_hash whose passages are live in search
    pages           integer,
    ocr_pages       integer NOT NULL DEFAULT 0,
    outline         jsonb,                    -- [{level, title, page}] from the PDF outline / EPUB TOC
    front_matter    jsonb,                    -- vault notes
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'ingested', 'failed', 'removed')),
    error           text,                     -- readable reason when status = 'failed'
    version         integer NOT NULL DEFAULT 0,  -- bumped each time new passages go live
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source, path),
    UNIQUE (source, partition_key)
);
-- the author as the file's metadata gives it (EPUB dc:creator, PDF Author), else as its
-- name does ("Author - Title.ext"); shown in results, a search filter. NULL for files
-- extracted before the column existed until they are extracted again: readers fall back
-- on the file name (library_pipeline.ingest.extract.titles.author_from_filename)
ALTER TABLE documents ADD COLUMN IF NOT EXISTS author text;

-- Extracted text per page (PDF) or spine item (EPUB) or file (txt), so
-- chunking can be re-tuned without extracting and OCR-ing again.
CREATE TABLE IF NOT EXISTS pages (
    document_id bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    page_no     integer NOT NULL,             -- 1-based
    label       text,                         -- page label, or EPUB item href
    heading     text,                         -- nearest outline / TOC entry covering this page
    text        text NOT NULL,
    ocr         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (document_id, page_no)
);

-- Chunking output of the current extraction, staged here so that the swap
-- into `passages` (the embeddings asset) is one transaction: search keeps
-- serving the previous version until the new one is fully embedded.
CREATE TABLE IF NOT EXISTS chunks (
    document_id  bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ordinal      integer NOT NULL,
    kind         text NOT NULL DEFAULT 'text',   -- text | toc | boilerplate (constraint below)
    page_start   integer,
    page_end     integer,
    heading      text,
    content      text NOT NULL,
    content_hash text NOT NULL,
    PRIMARY KEY (document_id, ordinal)
);
-- `boilerplate`: licence and publisher text (the Project Gutenberg header and
-- licence), kept and searchable on request but never fed to the graph or the
-- summaries. Dropped and re-added by name so that databases created with the
-- older two-kind constraint get the new one (chunks is a staging table: cheap).
ALTER TABLE chunks DROP CONSTRAINT IF EXISTS chunks_kind_check;
ALTER TABLE chunks ADD CONSTRAINT chunks_kind_check CHECK (kind IN ('text', 'toc', 'boilerplate'));

-- Everything searchable: verbatim chunks (summary_level = 0), RAPTOR
-- summaries (> 0), vault note sections, memory artifacts.
CREATE TABLE IF NOT EXISTS passages (
    id             bigserial PRIMARY KEY,
    document_id    bigint REFERENCES documents(id) ON DELETE CASCADE,  -- NULL for memories
    source         text NOT NULL DEFAULT 'library' CHECK (source IN ('library', 'vault', 'memory')),
    ordinal        integer NOT NULL DEFAULT 0,
    kind           text NOT NULL DEFAULT 'text',   -- text | toc | boilerplate | summary | note | memory
    summary_level  integer NOT NULL DEFAULT 0,
    summarises     bigint[],                      -- passage ids a summary covers
    page_start     integer,
    page_end       integer,
    heading        text,
    content        text NOT NULL,
    -- what the passage is part of ("<document title> — <heading>"), set by
    -- passages_context below; indexed with the content (tsv), as the embedder
    -- reads it with the content (serving.embedding.embed_text_for_passage)
    context        text,
    content_hash   text NOT NULL,                 -- sha256 of content
    embed_hash     text,                          -- sha256 of the exact text fed to the embedder (with prefix)
    ts_config      regconfig NOT NULL DEFAULT 'simple',
    -- one definition of a passage's tsvector, computed by Postgres with the
    -- passage's own configuration, so a Russian book is stemmed as Russian.
    tsv            tsvector GENERATED ALWAYS AS (to_tsvector(ts_config, coalesce(context || E'\n', '') || content)) STORED,
    -- dimensionless on purpose: the dimension belongs to the model. Each model
    -- gets its own partial HNSW index over a halfvec(N) cast (ensure_vector_indexes),
    -- so rows of two models are never compared with each other.
    embedding      halfvec,
    embed_model    text,
    -- denormalised filters the search lanes need without a join
    scope          text NOT NULL DEFAULT 'global' CHECK (scope IN ('self', 'department', 'global')),
    agent          text,
    department     text,
    removed        boolean NOT NULL DEFAULT false,  -- its file was removed from the library
    superseded     boolean NOT NULL DEFAULT false,  -- an older version of a note / memory
    archived       boolean NOT NULL DEFAULT false,  -- decayed memory
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- The keyword lane indexes a passage's title and heading with its text. Measured
-- (benchmarks/eval_tune.py, SciFact TRAIN first 400, nDCG@10): keyword lane alone
-- 0.6085 -> 0.6390, fused 0.6974 -> 0.7063 - a 96-token chunk of an abstract lost the
-- title words bm25s (whole documents) scores with. Set by a trigger so that every
-- writer (ingest, RAPTOR, vault, memory, eval loader) gets the same rule; BEFORE
-- triggers run before generated columns are computed. The same rule builds the text
-- the embedders read (serving.embedding.passage_context); a test checks they agree.
CREATE OR REPLACE FUNCTION passage_context(p_title text, p_heading text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(CASE WHEN lower(btrim(p_title)) = lower(btrim(p_heading)) THEN btrim(p_title)
                       ELSE concat_ws(' — ', nullif(btrim(p_title), ''), nullif(btrim(p_heading), '')) END, '')
$$;

CREATE OR REPLACE FUNCTION passages_set_context() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.context IS NULL THEN
        NEW.context := passage_context(
            (SELECT d.title FROM documents d WHERE d.id = NEW.document_id), NEW.heading);
    END IF;
    RETURN NEW;
END $$;


CREATE INDEX IF NOT EXISTS passages_document_idx ON passages (document_id, ordinal);
CREATE INDEX IF NOT EXISTS passages_tsv_idx ON passages USING gin (tsv);
CREATE INDEX IF NOT EXISTS passages_reuse_idx ON passages (embed_model, embed_hash);
CREATE INDEX IF NOT EXISTS documents_status_idx ON documents (source, status);

-- Per-model vector indexes. HNSW applies a WHERE clause after finding its
-- nearest neighbours; agent-library's (github.com/CreateM1nd/agent-library) summaries (1 in 15 rows) were
-- invisible for a week behind a `summary_level > 0` filter on the main index.
-- So summaries get their own partial index, and the main one covers only
-- verbatim rows. Queries must repeat the predicate literally
-- (embed_model = '<model>') for the planner to pick these indexes.
--
-- p_verbatim = false creates the summaries' index only. A first sync writes its
-- passages that way and the verbatim index is built once afterwards
-- (serving.passage_writer.build_vector_indexes): pgvector inserts each row into
-- the graph on its own, and 600 small files (1,800 passages) wrote at 9.4 ms per
-- passage with both models' HNSW indexes against 1.7 ms without them, while
-- building both indexes over the same rows afterwards took 1.4 s.
DROP FUNCTION IF EXISTS ensure_vector_indexes(text, integer);
-- An HNSW index's name: its column's prefix, 'summary_' for the summaries' one, and the
-- model's tag (asset checks look indexes up by it).
CREATE OR REPLACE FUNCTION hnsw_index_name(p_prefix text, p_model text, p_summaries boolean)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT p_prefix || CASE WHEN p_summaries THEN 'summary_' ELSE '' END || substr(md5(p_model), 1, 10);
$$;

DROP FUNCTION IF EXISTS ensure_hnsw_indexes(text, text, text, text, integer, boolean);
CREATE OR REPLACE FUNCTION ensure_hnsw_indexes(p_column text, p_model_column text, p_prefix text,
                                               p_model text, p_dims integer, p_verbatim boolean,
                                               p_m integer, p_ef_construction integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    summaries boolean;
    wanted boolean[] := CASE WHEN p_verbatim THEN ARRAY[false, true] ELSE ARRAY[true] END;
BEGIN
    -- Every writer's first write comes here. Two sessions running CREATE INDEX IF NOT
    -- EXISTS for one name both pass the existence check and the later one fails on
    -- pg_class's unique index (UniqueViolation: 8 agents' simultaneous first
    -- memory_index calls lost 0, 1 and 3 writes in three rounds). So one creator at a
    -- time, until its transaction commits, and the name is looked up again under the
    -- lock. The lookups come first and without the lock: CREATE INDEX IF NOT EXISTS
    -- takes a SHARE lock on passages even when the index exists, which would queue
    -- every later writer behind any open write transaction.
    IF NOT EXISTS (SELECT 1 FROM unnest(wanted) w
                   WHERE to_regclass(hnsw_index_name(p_prefix, p_model, w)) IS NULL) THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(7301118);
    FOREACH summaries IN ARRAY wanted LOOP
        CONTINUE WHEN to_regclass(hnsw_index_name(p_prefix, p_model, summaries)) IS NOT NULL;
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON passages USING hnsw ((%I::halfvec(%s)) halfvec_cosine_ops) '
            'WITH (m = %s, ef_construction = %s) WHERE %I = %L AND summary_level %s 0',
            hnsw_index_name(p_prefix, p_model, summaries), p_column, p_dims, p_m, p_ef_construction,
            p_model_column, p_model, CASE WHEN summaries THEN '>' ELSE '=' END);
    END LOOP;
END;
$$;

-- Graph parameters per lane, chosen for recall@10 >= 0.95 against an exact scan at a
-- million passages (benchmarks/search.py; serving/search/types.py has the figures by
-- ef_search): MiniLM m 24 / ef_construction 200 (0.982 at ef_search 800), USE-m3 m 32 /
-- 200 (0.955 at 1000). With 16 / 64 both lanes fell short (0.923 / 0.78 at 800). An index
-- keeps what it was built with: a library indexed before gets these when it is rebuilt.
CREATE OR REPLACE FUNCTION ensure_vector_indexes(p_model text, p_dims integer, p_verbatim boolean DEFAULT true)
RETURNS void LANGUAGE sql AS $$
    SELECT ensure_hnsw_indexes('embedding', 'embed_model', 'passages_hnsw_', p_model, p_dims, p_verbatim, 24, 200);
$$;

-- The second vector lane: every passage embedded a second time by a multilingual
-- model (serving.embedding.multilingual_embedder, LIBRARY_EMBED_MULTILINGUAL) beside
-- the primary one. Measured (nDCG@10): the English-only MiniLM scores 0.2861 on
-- Russian questions over Russian paragraphs (XQuAD ru) and 0.1098 over the English
-- originals; USE multilingual v3 0.8817 and 0.8527. Columns on `passages`, not rows
-- of passage_embeddings: the lane then filters exactly like the primary one (the
-- same row, the same predicate, no join in front of the HNSW scan), and a writer
-- stores both vectors in the one INSERT of the row. `embed_hash` is shared: both
-- models read the same text. NULL = not embedded by the second model (yet): a
-- library ingested before the lane existed is filled by
-- `library migrate embedder multilingual`.
ALTER TABLE passages ADD COLUMN IF NOT EXISTS embedding_multi halfvec;
ALTER TABLE passages ADD COLUMN IF NOT EXISTS embed_model_multi text;
CREATE INDEX IF NOT EXISTS passages_reuse_multi_idx ON passages (embed_model_multi, embed_hash);

-- The same partial-index discipline as ensure_vector_indexes, over the second column.
DROP FUNCTION IF EXISTS ensure_multilingual_indexes(text, integer);
CREATE OR REPLACE FUNCTION ensure_multilingual_indexes(p_model text, p_dims integer,
                                                       p_verbatim boolean DEFAULT true)
RETURNS void LANGUAGE sql AS $$
    SELECT ensure_hnsw_indexes('embedding_multi', 'embed_model_multi', 'passages_hnsw_multi_', p_model, p_dims,
                               p_verbatim, 32, 200);
$$;

-- Which embedding model search uses; a re-embed migration switches it in one step.
CREATE TABLE IF NOT EXISTS settings (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);

-- Corpus document frequency per lexeme, text-search configuration and source: the
-- keyword lane's IDF (BM25 over the postings below). Counted per source and summed
-- over the sources a search reads (the sources partition the passages, so df, N and
-- total length add up): counted over every passage, 2,960 agents' private memories
-- stored beside the example library's 3,918 book passages moved the books' own
-- ranking (English average length 30.9 -> 25.8 lexemes, right book's MRR 0.9659 -> 0.9545).
CREATE TABLE IF NOT EXISTS lexeme_df (
    ts_config regconfig NOT NULL,
    source    text NOT NULL,
    lexeme    text NOT NULL,
    df        integer NOT NULL,
    PRIMARY KEY (ts_config, source, lexeme)
);
CREATE TABLE IF NOT EXISTS lexeme_df_totals (
    ts_config  regconfig NOT NULL,
    source     text NOT NULL,
    passages   integer NOT NULL,
    avg_length double precision NOT NULL,
    refreshed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ts_config, source)
);
-- documents holding those passages: the keyword lane's document-level BM25 normalises
-- a document's length (its passage count) by passages / documents
ALTER TABLE lexeme_df_totals ADD COLUMN IF NOT EXISTS documents integer;

-- Recomputed wholesale from the stored tsvectors (serving.lexemes.refresh_lexeme_df
-- wraps it). The population is what the keyword lane searches: verbatim passages
-- not removed, superseded or archived; lengths are length(tsv), distinct lexemes,
-- the measure the lane's BM25 uses. DELETE + INSERT in the caller's transaction, so
-- readers keep the old statistics until it commits (TRUNCATE would lock them out).
-- p_sources: recount only those sources (memories are written between ingests; their
-- own recount reads their passages alone). NULL: every source.
DROP FUNCTION IF EXISTS lexeme_df_rebuild();
CREATE OR REPLACE FUNCTION lexeme_df_rebuild(p_sources text[] DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7301116);   -- one refresh at a time
    DELETE FROM lexeme_df WHERE p_sources IS NULL OR source = ANY(p_sources);
    DELETE FROM lexeme_df_totals WHERE p_sources IS NULL OR source = ANY(p_sources);
    -- tsvector_to_array yields each lexeme once per passage, so count(*) is the df
    INSERT INTO lexeme_df (ts_config, source, lexeme, df)
        SELECT p.ts_config, p.source, u.lexeme, count(*)
        FROM passages p, unnest(tsvector_to_array(p.tsv)) AS u(lexeme)
        WHERE p.summary_level = 0 AND NOT p.removed AND NOT p.superseded AND NOT p.archived
          AND (p_sources IS NULL OR p.source = ANY(p_sources))
        GROUP BY 1, 2, 3;
    GET DIAGNOSTICS n = ROW_COUNT;
    -- documents: a memory (no document) counts as a document of one passage
    INSERT INTO lexeme_df_totals (ts_config, source, passages, avg_length, documents, refreshed_at)
        SELECT ts_config, source, count(*), coalesce(avg(length(tsv)), 0),
               count(DISTINCT coalesce(document_id, -id)), now() FROM passages
        WHERE summary_level = 0 AND NOT removed AND NOT superseded AND NOT archived
          AND (p_sources IS NULL OR source = ANY(p_sources))
        GROUP BY 1, 2;
    RETURN n;
END $$;

-- Databases whose statistics were counted over every source at once: keyed by source
-- (rows of the old shape labelled 'library' only until the rebuild replaces them).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'lexeme_df'::regclass AND attname = 'source') THEN
        ALTER TABLE lexeme_df ADD COLUMN source text NOT NULL DEFAULT 'library';
        ALTER TABLE lexeme_df ALTER COLUMN source DROP DEFAULT;
        ALTER TABLE lexeme_df DROP CONSTRAINT lexeme_df_pkey;
        ALTER TABLE lexeme_df ADD PRIMARY KEY (ts_config, source, lexeme);
        ALTER TABLE lexeme_df_totals ADD COLUMN source text NOT NULL DEFAULT 'library';
        ALTER TABLE lexeme_df_totals ALTER COLUMN source DROP DEFAULT;
        ALTER TABLE lexeme_df_totals DROP CONSTRAINT lexeme_df_totals_pkey;
        ALTER TABLE lexeme_df_totals ADD PRIMARY KEY (ts_config, source);
        IF EXISTS (SELECT 1 FROM lexeme_df_totals) THEN
            PERFORM lexeme_df_rebuild();
        END IF;
    END IF;
END $$;

-- Databases created before passages.context existed get the trigger, the new
-- tsvector expression (a table rewrite, once), the context backfilled and fresh
-- lexeme statistics.
ALTER TABLE passages ADD COLUMN IF NOT EXISTS context text;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'passages_context'
                   AND tgrelid = 'passages'::regclass) THEN
        CREATE TRIGGER passages_context BEFORE INSERT ON passages
            FOR EACH ROW EXECUTE FUNCTION passages_set_context();
    END IF;
    -- databases created before `context` existed: new expression, backfilled once
    IF (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'passages'::regclass AND a.attname = 'tsv') NOT LIKE '%context%' THEN
        UPDATE passages p SET context = passage_context(d.title, p.heading)
            FROM documents d WHERE d.id = p.document_id AND p.context IS NULL;
        UPDATE passages SET context = passage_context(NULL, heading)
            WHERE document_id IS NULL AND context IS NULL;
        ALTER TABLE passages ALTER COLUMN tsv
            SET EXPRESSION AS (to_tsvector(ts_config, coalesce(context || E'\n', '') || content));
        IF EXISTS (SELECT 1 FROM lexeme_df_totals) THEN
            PERFORM lexeme_df_rebuild();   -- its statistics described the old tsvectors
        END IF;
    END IF;
END $$;

-- ---------------------------------------------------------------------------
-- Keyword lane: BM25 over an inverted index (serving/search/keyword.py).
-- One row per (passage, lexeme) of every verbatim passage (summary_level = 0):
-- tf = occurrences of the lexeme (its tsvector positions; 1 for a stripped
-- tsvector), dl = the passage's length in distinct lexemes (length(tsv), the
-- measure lexeme_df_totals.avg_length averages). The lane walks each query
-- term's list in impact order and stops after a bounded number of rows, so a
-- rare term's list is read whole (exact) and a common term's best rows are
-- read first. impact is tf / (tf + 1.2 * (0.25 + 0.75 * dl / 64)): BM25's tf
-- part with a fixed reference length, an ordering only (the lane scores with
-- the corpus's own average length and the configured k1 / b).
-- Kept in step by the database itself (statement triggers below), so every
-- writer - ingest, RAPTOR, vault, memory, the eval loader, migrations - stays
-- correct without code of its own.
--
-- segment: which part of the library a row belongs to - its passage's source and
-- scope, and whether a default search hides it (removed, superseded, archived,
-- cold, or licence boilerplate) - one small number (postings_segment). Each term's
-- list is ordered by segment and then impact, so a search walks only the segments
-- its filters allow: a memory search or a search of one scope reads that part's
-- postings, not the library's. With postings in one list, a filter passing 2% of
-- a million passages read ~50 rows per row it kept (the keyword lane's p50 340 ms).
-- A row whose segment already proves the search's predicate (visible, a source and
-- scope the filters name, nothing else asked) is taken without looking at its
-- passage; any other is checked against the predicate on passages. document_id
-- (never changes for a passage) saves the lane that lookup for the rows it takes.
CREATE TABLE IF NOT EXISTS postings (
    ts_config   regconfig NOT NULL,
    lexeme      text NOT NULL,
    passage_id  bigint NOT NULL,
    tf          integer NOT NULL,
    dl          integer NOT NULL,
    impact      real NOT NULL,
    segment     smallint NOT NULL DEFAULT 0,
    document_id bigint
);
-- a database from before segments: its rows are written again below (postings_rebuild)
ALTER TABLE postings ADD COLUMN IF NOT EXISTS segment smallint NOT NULL DEFAULT 0;
ALTER TABLE postings ADD COLUMN IF NOT EXISTS document_id bigint;
-- memory retention tier (serving.memory); here because postings_of reads it
ALTER TABLE passages ADD COLUMN IF NOT EXISTS cold boolean NOT NULL DEFAULT false;

-- source (library 0, vault 1, memory 2) x 8 + scope (global 0, department 1, self 2) x 2
-- + hidden; serving.search.filters.posting_segments enumerates the same codes through it.
CREATE OR REPLACE FUNCTION postings_segment(p_source text, p_scope text, p_hidden boolean)
RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((CASE p_source WHEN 'library' THEN 0 WHEN 'vault' THEN 1 ELSE 2 END) * 8
          + (CASE p_scope WHEN 'global' THEN 0 WHEN 'department' THEN 1 ELSE 2 END) * 2
          + (CASE WHEN p_hidden THEN 1 ELSE 0 END))::smallint
$$;

-- What a search that asks for nothing special leaves out (serving.search.filters
-- passage_predicate's defaults).
CREATE OR REPLACE FUNCTION postings_hidden(p_removed boolean, p_superseded boolean, p_archived boolean,
                                           p_cold boolean, p_kind text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_removed OR p_superseded OR p_archived OR p_cold OR p_kind = 'boilerplate'
$$;

CREATE OR REPLACE FUNCTION postings_impact(p_tf integer, p_dl integer)
RETURNS real LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (p_tf / (p_tf + 1.2 * (0.25 + 0.75 * p_dl / 64.0)))::real
$$;

-- The rows of one passage; the single definition every trigger and the rebuild use.
CREATE OR REPLACE FUNCTION postings_of(p passages)
RETURNS TABLE (ts_config regconfig, lexeme text, passage_id bigint, tf integer, dl integer, impact real,
               segment smallint, document_id bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p.ts_config, u.lexeme, p.id, coalesce(array_length(u.positions, 1), 1),
           length(p.tsv), postings_impact(coalesce(array_length(u.positions, 1), 1), length(p.tsv)),
           postings_segment(p.source, p.scope,
                            postings_hidden(p.removed, p.superseded, p.archived, p.cold, p.kind)),
           p.document_id
    FROM unnest(p.tsv) AS u
$$;

CREATE OR REPLACE FUNCTION postings_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO postings SELECT x.* FROM new_rows n, postings_of(n) x
        WHERE n.summary_level = 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION postings_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM postings WHERE passage_id IN (SELECT id FROM old_rows);
    RETURN NULL;
END $$;

-- Fires on every UPDATE of passages (transition tables cannot be combined with a
-- column list) but touches only rows whose tsvector or level changed (their rows
-- written again) or whose segment did (a file removed, a memory superseded, archived,
-- cooled or promoted: their rows' segment set in place); a new embedding costs one
-- join of the transition tables.
CREATE OR REPLACE FUNCTION postings_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH changed AS (
        SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.tsv IS DISTINCT FROM o.tsv OR n.summary_level <> o.summary_level
           OR n.ts_config <> o.ts_config
    ), gone AS (
        DELETE FROM postings WHERE passage_id IN (SELECT id FROM changed)
    )
    INSERT INTO postings SELECT x.* FROM new_rows n, postings_of(n) x
        WHERE n.summary_level = 0 AND n.id IN (SELECT id FROM changed);
    WITH moved AS (
        SELECT n.id, postings_segment(n.source, n.scope,
                                      postings_hidden(n.removed, n.superseded, n.archived, n.cold, n.kind)) AS seg
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.summary_level = 0 AND n.tsv IS NOT DISTINCT FROM o.tsv AND n.summary_level = o.summary_level
          AND n.ts_config = o.ts_config
          AND (n.source, n.scope, n.removed, n.superseded, n.archived, n.cold, n.kind)
              IS DISTINCT FROM (o.source, o.scope, o.removed, o.superseded, o.archived, o.cold, o.kind)
    )
    UPDATE postings po SET segment = m.seg FROM moved m WHERE po.passage_id = m.id AND po.segment <> m.seg;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION postings_on_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE postings;
    RETURN NULL;
END $$;

-- Rebuilt from the stored tsvectors: the backfill of a database that predates the
-- table, and the repair after anything that rewrote tsvectors without firing
-- triggers (ALTER COLUMN ... SET EXPRESSION). Returns the rows written.
CREATE OR REPLACE FUNCTION postings_rebuild() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7301117);
    DELETE FROM postings;
    INSERT INTO postings SELECT x.* FROM passages p, postings_of(p) x
        WHERE p.summary_level = 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- The list before segments (one order by impact): dropped, and every row written again
-- with its segment and document before the new index is built over them.
DO $$
BEGIN
    IF to_regclass('postings_impact_idx') IS NOT NULL THEN
        DROP INDEX postings_impact_idx;
        PERFORM postings_rebuild();
    END IF;
END $$;
-- passage_id in the key: ties of impact come in one order in every segment, so walking
-- several segments and merging them by (impact, passage_id) takes the rows one walk of a
-- single list would
CREATE INDEX IF NOT EXISTS postings_segment_idx ON postings (ts_config, lexeme, segment, impact DESC, passage_id)
    INCLUDE (document_id, tf, dl);
CREATE INDEX IF NOT EXISTS postings_passage_idx ON postings (passage_id);

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'passages_postings_insert'
                   AND tgrelid = 'passages'::regclass) THEN
        CREATE TRIGGER passages_postings_insert AFTER INSERT ON passages
            REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION postings_on_insert();
        CREATE TRIGGER passages_postings_delete AFTER DELETE ON passages
            REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION postings_on_delete();
        CREATE TRIGGER passages_postings_update AFTER UPDATE ON passages
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION postings_on_update();
        CREATE TRIGGER passages_postings_truncate AFTER TRUNCATE ON passages
            FOR EACH STATEMENT EXECUTE FUNCTION postings_on_truncate();
        -- a database that had passages before the table existed: index them once
        PERFORM postings_rebuild();
    END IF;
END $$;

-- Text-search configuration for an ISO 639-1 language code. Postgres ships
-- Snowball stemmers for these; anything else is indexed with 'simple'
-- (lower-cased, unstemmed) rather than wrongly stemmed as English.
CREATE OR REPLACE FUNCTION ts_config_for_language(p_lang text)
RETURNS regconfig LANGUAGE sql IMMUTABLE AS $$
    SELECT (CASE lower(coalesce(p_lang, ''))
        WHEN 'en' THEN 'english' WHEN 'ru' THEN 'russian' WHEN 'de' THEN 'german'
        WHEN 'fr' THEN 'french'  WHEN 'es' THEN 'spanish' WHEN 'it' THEN 'italian'
        WHEN 'pt' THEN 'portuguese' WHEN 'nl' THEN 'dutch' WHEN 'sv' THEN 'swedish'
        WHEN 'no' THEN 'norwegian' WHEN 'da' THEN 'danish' WHEN 'fi' THEN 'finnish'
        WHEN 'hu' THEN 'hungarian' WHEN 'ro' THEN 'romanian' WHEN 'tr' THEN 'turkish'
        ELSE 'simple' END)::regconfig
$$;

-- ---------------------------------------------------------------------------
-- Serving: circuit breaker and query log
-- Circuit breaker state, shared by every serving process (a local file would
-- count per process and forget on restart). One row per component:
--   pool   - unfiltered searches whose fused pool was empty (no rows embedded
--            with the current model? the index gone?)
--   vector - vector lane returned uniform similarities (constant vectors:
--            a broken embedder); while open, the vector lane is bypassed
--   rerank - the cross-encoder returned uniform scores; while open, the fused
--            order is kept
CREATE TABLE IF NOT EXISTS search_breaker (
    component        text PRIMARY KEY,
    consecutive      integer NOT NULL DEFAULT 0,   -- degenerate results in a row
    degenerate_total bigint NOT NULL DEFAULT 0,
    last_reason      text,
    last_query       text,
    opened_at        timestamptz,                  -- set when `consecutive` reaches the threshold
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Every search an agent or the CLI ran: agent-library's most useful
-- evaluation set was built from a week of these (real queries are known-item
-- lookups, not the well-formed questions a benchmark assumes).
CREATE TABLE IF NOT EXISTS search_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    query       text NOT NULL,
    top_k       integer NOT NULL,
    filters     jsonb,
    config      text,
    returned    integer NOT NULL,
    pool        integer NOT NULL,
    lanes       jsonb,          -- lane -> candidates it contributed
    timings     jsonb,          -- stage -> ms
    degenerate  text            -- why the breaker counted this search, if it did
);
CREATE INDEX IF NOT EXISTS search_log_at_idx ON search_log (at);

-- ---------------------------------------------------------------------------
-- Agent memory (the Librarian: serving/memory writes, library_pipeline/defs/memory curates)
-- One row per version of an agent's artifact. Its text is also stored as one or
-- more `passages` rows (source 'memory', memory_id below) so that the same
-- search lanes find it; scope / agent / department / archived / superseded /
-- cold are denormalised onto those rows and kept in step by every writer.
-- Visibility (self: the owning agent; department: that department; global: all)
-- is a WHERE clause in every read (serving.search.filters.visibility).
CREATE TABLE IF NOT EXISTS memories (
    id              bigserial PRIMARY KEY,
    artifact_id     text NOT NULL,
    version         integer NOT NULL DEFAULT 1,
    agent           text NOT NULL,
    department      text,
    scope           text NOT NULL CHECK (scope IN ('self', 'department', 'global')),
    type            text,
    meta            jsonb NOT NULL DEFAULT '{}'::jsonb,
    content         text NOT NULL,
    content_hash    text NOT NULL,            -- memory_content_hash(content): normalised
    chunks          integer NOT NULL DEFAULT 1,
    relevance       numeric(4, 3) NOT NULL DEFAULT 1.0,
    decay_steps     integer NOT NULL DEFAULT 0,   -- decay periods applied since the last access
    access_count    integer NOT NULL DEFAULT 0,
    accessed_at     timestamptz,
    archived_at     timestamptz,              -- decayed below the threshold (hidden by default)
    duplicate_of    bigint REFERENCES memories(id),  -- near/exact duplicate merged into that record
    promoted_at     timestamptz,
    promoted_reason text,
    tier            text NOT NULL DEFAULT 'active' CHECK (tier IN ('active', 'cold')),
    cold_at         timestamptz,
    superseded      boolean NOT NULL DEFAULT false,  -- an older version of its artifact (kept)
    superseded_at   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (agent, artifact_id, version)
);
CREATE INDEX IF NOT EXISTS memories_hash_idx ON memories (scope, content_hash) WHERE NOT superseded;
CREATE INDEX IF NOT EXISTS memories_artifact_idx ON memories (artifact_id);
CREATE INDEX IF NOT EXISTS memories_activity_idx ON memories (tier, scope, (coalesce(accessed_at, created_at)));
-- a record's thread neighbours (serving/memory/context.py): the records of the same agent and
-- meta.thread just before / after it
CREATE INDEX IF NOT EXISTS memories_thread_idx ON memories (agent, (meta->>'thread'), id) WHERE meta ? 'thread';

-- Every read of a memory (search hit or get): who, when, which query.
CREATE TABLE IF NOT EXISTS memory_access_log (
    id          bigserial PRIMARY KEY,
    memory_id   bigint NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    agent       text,
    department  text,
    action      text NOT NULL DEFAULT 'search',   -- search | get
    query       text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS memory_access_log_memory_idx ON memory_access_log (memory_id, at);

ALTER TABLE passages ADD COLUMN IF NOT EXISTS memory_id bigint REFERENCES memories(id) ON DELETE CASCADE;

-- A posting the keyword lane (BM25 over `postings`, above) reads outside the segments
-- that prove the search's filters is checked against the search's predicate on its
-- passage. Through the primary key that is a heap fetch of a wide row (text, tsvector,
-- two vectors: ~4 KB) scattered over the whole table; this narrow covering index
-- answers the same check from ~70 bytes a row (an index-only scan once the visibility
-- map is set), so the lookups stay in cache at 1M passages. It holds every column
-- serving.search.filters.passage_predicate reads, plus document_id.
CREATE INDEX IF NOT EXISTS passages_filter_idx ON passages (id)
    INCLUDE (document_id, source, kind, scope, agent, department, removed, superseded, archived, cold, memory_id);
CREATE INDEX IF NOT EXISTS passages_memory_idx ON passages (memory_id) WHERE memory_id IS NOT NULL;
-- A filtered vector search counts the rows its filter leaves at one level (passages or
-- summaries), up to a bound, and scans them exactly when they are few
-- (serving/search/vector.py scans_exactly): this index finds a source's or a scope's rows
-- of a level and answers the rest of the filter from its own columns.
CREATE INDEX IF NOT EXISTS passages_level_idx ON passages (summary_level, source, scope)
    INCLUDE (kind, removed, superseded, archived, cold, agent, department, document_id);
-- Calibrated fusion's background sample (serving/search/calibration.py Background) is each
-- model's first passages in the order of a multiplicative hash of their ids, the same sample
-- on every call. Without an index in that order the sample read and sorted every passage:
-- 7.6 s at a million passages, paid inside a search once an hour per model and process.
-- In numeric, where a bigint product overflows from id 3,474,701,544 on (and an index on it
-- would then refuse the insert); below that the order is the bigint one's, row for row.
CREATE INDEX IF NOT EXISTS passages_sample_idx ON passages (((id * 2654435761::numeric) % 4294967296))
    WHERE summary_level = 0;

-- The one normalisation of memory content for exact dedup: Unicode NFKC,
-- lower case, whitespace runs collapsed, trimmed. Serving (index time) and the
-- pipeline (the "no exact duplicates in global" check) both hash through here.
CREATE OR REPLACE FUNCTION memory_normalise(p_content text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lower(btrim(regexp_replace(normalize(p_content, NFKC), '\s+', ' ', 'g')))
$$;
CREATE OR REPLACE FUNCTION memory_content_hash(p_content text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(memory_normalise(p_content), 'UTF8')), 'hex')
$$;

-- ---------------------------------------------------------------------------
-- Re-embed migration and query logs
-- Vectors of the model a migration moves to, one row per passage, written in
-- batches while search keeps reading passages.embedding (the active model).
-- A side table rather than extra passages rows or columns: the keyword, title
-- and structure lanes read passages without any model filter, so duplicate rows
-- would be found twice, and a second column would rewrite every passage row on
-- each batch. Here passages stay untouched until the switch, which copies these
-- vectors in and flips `settings.embed_model` in one transaction
-- (library_pipeline/migrate.py). Rows vanish with their passage (a file
-- re-ingested mid-migration gets new ids, which the migration picks up).
CREATE TABLE IF NOT EXISTS passage_embeddings (
    model       text NOT NULL,
    passage_id  bigint NOT NULL REFERENCES passages(id) ON DELETE CASCADE,
    embedding   halfvec NOT NULL,
    embed_hash  text,              -- sha256 of the exact text embedded (reuse across identical passages)
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, passage_id)
);
CREATE INDEX IF NOT EXISTS passage_embeddings_passage_idx ON passage_embeddings (passage_id);
CREATE INDEX IF NOT EXISTS passage_embeddings_hash_idx ON passage_embeddings (model, embed_hash);

-- Query log: memory_search calls too (kind), who asked (never exported by
-- `library eval real-set`), what came back in order, and the latency.
ALTER TABLE search_log ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'library';  -- library | memory
ALTER TABLE search_log ADD COLUMN IF NOT EXISTS caller_agent text;
ALTER TABLE search_log ADD COLUMN IF NOT EXISTS caller_department text;
ALTER TABLE search_log ADD COLUMN IF NOT EXISTS results jsonb;        -- [{"id", "lanes": {lane: rank}}] as returned
ALTER TABLE search_log ADD COLUMN IF NOT EXISTS latency_ms double precision;

-- ---------------------------------------------------------------------------
-- Enrichment: RAPTOR and knowledge graph
-- RAPTOR summaries are `passages` rows (summary_level > 0, kind 'summary',
-- `summarises` = the ids one level down), searched through their own partial
-- HNSW index (ensure_vector_indexes). raptor_builds records what each file's
-- tree was built from, so an unchanged file is skipped and a changed one rebuilt.
CREATE TABLE IF NOT EXISTS raptor_builds (
    document_id  bigint PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    version      integer NOT NULL,          -- documents.version the tree summarises
    embed_model  text NOT NULL,
    summariser   text NOT NULL,             -- 'extractive' or '<backend>:<model>'
    levels       integer NOT NULL,
    nodes        integer NOT NULL,
    built_at     timestamptz NOT NULL DEFAULT now()
);

-- The closed vocabulary (serving/ontology.py maps raw labels onto it; these
-- tables make the database refuse anything else, so a writer that bypasses the
-- mapper fails loudly instead of splitting `tool` from `tools` again). The
-- Python lists and these rows are compared by a test.
CREATE TABLE IF NOT EXISTS kg_entity_types (name text PRIMARY KEY, description text NOT NULL);
CREATE TABLE IF NOT EXISTS kg_relation_types (name text PRIMARY KEY, description text NOT NULL);
INSERT INTO kg_entity_types (name, description) VALUES
    ('person', 'a real or fictional person, a character'),
    ('organization', 'a company, institution, group, agency, team'),
    ('place', 'a city, country, region, building, address, landmark'),
    ('event', 'a named event, war, incident, meeting'),
    ('work', 'a book, paper, story, article, film, document'),
    ('concept', 'an idea, theory, topic, field, abstract notion'),
    ('technique', 'a method, procedure, attack technique, practice'),
    ('tool', 'a tool or instrument (software or physical) used to do something'),
    ('software', 'a program, library, framework, operating system, service'),
    ('protocol', 'a network or communication protocol'),
    ('standard', 'a specification, law, regulation, RFC, format'),
    ('vulnerability', 'a weakness, CVE, flaw'),
    ('algorithm', 'an algorithm, data structure, mathematical procedure'),
    ('hardware', 'a device, machine, vehicle, component'),
    ('language', 'a natural or programming language'),
    ('other', 'anything the mapping could not place (raw label kept in type_raw)')
ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description;
INSERT INTO kg_relation_types (name, description) VALUES
    ('uses', 'source uses target (also raw "used by": direction as stated, never rewritten)'),
    ('part_of', 'source is part of / member of target'),
    ('type_of', 'source is a kind / instance of target'),
    ('created_by', 'source was written / made / founded by target'),
    ('depends_on', 'source requires target'),
    ('implements', 'source implements target'),
    ('targets', 'source attacks / exploits / is aimed at target'),
    ('mitigates', 'source prevents / defends against target'),
    ('located_in', 'source is located in target'),
    ('describes', 'source describes / is about target'),
    ('family_of', 'source is a relative or spouse of target (relation_raw says which: "father of")'),
    ('associate_of', 'source is a friend, servant, employer, client, colleague of target (raw says which)'),
    ('related_to', 'anything else, and same-sentence co-occurrence (count = sentences)')
ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description;

-- THE name normalisation of graph entities, used by the write path (entity
-- resolution at insert) and the read path (lookups): NFKC, lower case,
-- ё -> е, typographic apostrophes unified, a trailing possessive and a
-- leading English article dropped, punctuation (except + and #, for C++ / C#)
-- to spaces, whitespace collapsed. "The Red-Headed League" and "red headed
-- league" are one node.
CREATE OR REPLACE FUNCTION kg_normalise_name(p_name text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT btrim(regexp_replace(
        regexp_replace(
            regexp_replace(
                regexp_replace(regexp_replace(replace(lower(normalize(coalesce(p_name, ''), NFKC)), 'ё', 'е'),
                                              '[’‘`´]', '''', 'g'), '''s\s*$', ''),
                '^\s*(the|a|an)\s+', ''),
            '[^[:alnum:]+#]+', ' ', 'g'),
        '\s+', ' ', 'g'))
$$;

CREATE TABLE IF NOT EXISTS entities (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL,                -- display form (first seen)
    name_norm   text NOT NULL UNIQUE,         -- kg_normalise_name(name): one concept, one node
    type        text NOT NULL REFERENCES kg_entity_types(name),
    type_raw    text,                         -- the label the extractor gave for the winning type
    type_votes  jsonb NOT NULL DEFAULT '{}',  -- canonical type -> mentions; `type` is the top one
    mentions    integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS entities_type_idx ON entities (type, mentions DESC);

-- Other normalised spellings resolved onto an entity (edit distance <= 2,
-- inflected Russian forms before lemmatisation was added, LLM variants).
CREATE TABLE IF NOT EXISTS entity_aliases (
    alias_norm  text PRIMARY KEY,
    entity_id   bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE
);
-- the alias as written ("Holmes", «Петр Андреич»), for display
ALTER TABLE entity_aliases ADD COLUMN IF NOT EXISTS alias text;
CREATE INDEX IF NOT EXISTS entity_aliases_entity_idx ON entity_aliases (entity_id);

-- A short name shared by several full names of one file ("Stoner": Helen and
-- Julia Stoner): no entity of its own there; a lookup answers with these candidates.
CREATE TABLE IF NOT EXISTS entity_alias_candidates (
    alias_norm   text NOT NULL,
    entity_id    bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    document_id  bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    PRIMARY KEY (alias_norm, entity_id, document_id)
);

-- Which files mention an entity, how often: source_count = rows here.
CREATE TABLE IF NOT EXISTS entity_sources (
    entity_id    bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    document_id  bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    mentions     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (entity_id, document_id)
);
CREATE INDEX IF NOT EXISTS entity_sources_document_idx ON entity_sources (document_id);

-- One row per (edge, raw label, file): queries aggregate across files and rank
-- by how many files assert an edge. Direction is the extractor's, never inferred.
CREATE TABLE IF NOT EXISTS relations (
    id            bigserial PRIMARY KEY,
    source_id     bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    target_id     bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    relation      text NOT NULL REFERENCES kg_relation_types(name),
    relation_raw  text NOT NULL,
    document_id   bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    count         integer NOT NULL DEFAULT 1,
    evidence      text,                       -- one sentence that asserted it
    extractor     text NOT NULL,              -- pattern | cooccurrence | dependency | <llm name>
    CHECK (source_id <> target_id),
    UNIQUE (source_id, target_id, relation, relation_raw, document_id)
);
CREATE INDEX IF NOT EXISTS relations_source_idx ON relations (source_id, relation);
CREATE INDEX IF NOT EXISTS relations_target_idx ON relations (target_id, relation);
CREATE INDEX IF NOT EXISTS relations_document_idx ON relations (document_id);

-- Incremental extraction: a run takes at most its passage budget, commits each
-- batch together with the position reached, and the next run resumes there.
-- A file whose passages changed (documents.version) starts over.
CREATE TABLE IF NOT EXISTS kg_progress (
    document_id     bigint PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    version         integer NOT NULL,
    extractor       text NOT NULL,
    next_ordinal    integer NOT NULL DEFAULT 0,
    passages_done   integer NOT NULL DEFAULT 0,
    passages_total  integer NOT NULL DEFAULT 0,
    started_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz
);

-- Which files the graph may answer from: a file's graph rows follow the file the
-- way its passages do. A file marked removed is hidden at once (and its rows go
-- with its `documents` row at `library purge`); an edited file's rows belong to
-- the version its extraction started from (kg_progress.version: a new version is
-- forgotten and extracted again, never added to), so between the edit and the
-- rebuild they are hidden and coverage names the file as pending. Every graph
-- read joins this view; an entity is live while one of these files mentions it.
-- A file re-ingested with the same bytes (`library ingest --force`) has a new
-- version but the same text: its graph stays live while it is extracted again
-- (kg_progress.content_hash: the documents.indexed_hash it was extracted from).
-- Rows with no progress row at all were written outside the budgeted extraction,
-- which always records the version first; nothing tells them stale, so they count.
ALTER TABLE kg_progress ADD COLUMN IF NOT EXISTS content_hash text;

CREATE OR REPLACE VIEW kg_live_documents AS
    SELECT d.id FROM documents d LEFT JOIN kg_progress k ON k.document_id = d.id
    WHERE d.status <> 'removed'
      AND (k.document_id IS NULL OR k.version = d.version OR k.content_hash = d.indexed_hash);

CREATE OR REPLACE VIEW kg_live_entities AS
    SELECT e.id, e.name, e.name_norm, e.type, e.mentions FROM entities e
    WHERE EXISTS (SELECT 1 FROM entity_sources s JOIN kg_live_documents l ON l.id = s.document_id
                  WHERE s.entity_id = e.id);

-- A file's contributions to the graph, deleted (before it is extracted again, and
-- by `library purge`): its mentions, relations and shared-name candidates; the
-- entities no other file mentions; the mention counts of the rest recounted from
-- what the other files still assert.
CREATE OR REPLACE FUNCTION kg_forget_documents(p_ids bigint[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    touched bigint[];
    orphans integer;
BEGIN
    DELETE FROM entity_alias_candidates WHERE document_id = ANY(p_ids);
    WITH gone AS (DELETE FROM entity_sources WHERE document_id = ANY(p_ids) RETURNING entity_id)
    SELECT coalesce(array_agg(DISTINCT entity_id), '{}') INTO touched FROM gone;
    DELETE FROM relations WHERE document_id = ANY(p_ids);
    DELETE FROM entities e WHERE e.id = ANY(touched)
        AND NOT EXISTS (SELECT 1 FROM entity_sources s WHERE s.entity_id = e.id);
    GET DIAGNOSTICS orphans = ROW_COUNT;
    UPDATE entities e SET mentions = (SELECT coalesce(sum(mentions), 0) FROM entity_sources s
                                      WHERE s.entity_id = e.id)
    WHERE e.id = ANY(touched);
    RETURN orphans;
END $$;

-- ---------------------------------------------------------------------------
-- Vault
-- Obsidian notes synced from a git repository (library_pipeline/vault, the
-- `vault` asset group). A note is a `documents` row (source 'vault', path
-- relative to the repository root, `front_matter` jsonb); its `##` sections are
-- `passages` rows (source 'vault', kind 'note', scope 'global', agent 'vault').
-- A new version supersedes the old rows (superseded = true, kept, searchable on
-- request); a deleted note is `removed`; a rename updates the documents row in
-- place, so every version stays attached to the note.
ALTER TABLE documents ADD COLUMN IF NOT EXISTS vault_blob text;        -- git blob id of the live version
ALTER TABLE passages ADD COLUMN IF NOT EXISTS note_version integer;    -- documents.version the row belongs to

-- One row per indexed version of a note: which commit and blob it came from.
CREATE TABLE IF NOT EXISTS vault_note_versions (
    document_id  bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    version      integer NOT NULL,
    path         text NOT NULL,           -- the path at that version (renames change it)
    commit_sha   text,
    blob         text NOT NULL,
    title        text,
    front_matter jsonb,
    tags         text[] NOT NULL DEFAULT '{}',   -- front-matter tags and #tags in the body
    aliases      text[] NOT NULL DEFAULT '{}',
    callouts     jsonb NOT NULL DEFAULT '[]'::jsonb,  -- [{type, title, fold}]
    sections     integer NOT NULL,
    passages     integer NOT NULL,
    warnings     text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (document_id, version)
);

-- Links between notes, as written in the live version of the source note:
-- `[[target#heading|alias]]` (link), `![[target]]` (embed), or a link inside a
-- front-matter property (property, with the key). The target stays as written;
-- `note_edges` resolves it the way Obsidian does (exact path, else the
-- shortest path ending in that name).
CREATE TABLE IF NOT EXISTS note_links (
    from_document bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ordinal       integer NOT NULL,
    target        text NOT NULL,          -- '' for a same-note `[[#Heading]]`
    alias         text,
    heading       text,
    kind          text NOT NULL CHECK (kind IN ('link', 'embed', 'property')),
    property      text,
    PRIMARY KEY (from_document, ordinal)
);
CREATE INDEX IF NOT EXISTS note_links_target_idx ON note_links (lower(target));

CREATE OR REPLACE VIEW note_edges AS
SELECT l.*,
       CASE WHEN l.target = '' THEN l.from_document ELSE (
           SELECT d.id FROM documents d
           WHERE d.source = 'vault' AND d.status <> 'removed'
             AND (lower(d.path) = lower(l.target) || '.md' OR lower(d.path) = lower(l.target)
                  OR right(lower(d.path), length(l.target) + 4) = '/' || lower(l.target) || '.md')
           ORDER BY length(d.path), d.path LIMIT 1) END AS to_document
FROM note_links l;

-- Sync state per vault repository and branch: the last commit whose changes
-- are fully indexed (the freshness check measures the head's lead over it).
CREATE TABLE IF NOT EXISTS vault_state (
    repo           text NOT NULL,
    branch         text NOT NULL,
    last_commit    text,
    last_sync_id   bigint,
    last_synced_at timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repo, branch)
);

-- Every sync (sensor tick, `library vault sync`, the post-receive hook):
-- what it compared, what it asked for, and "N files processed, N chunks indexed".
CREATE TABLE IF NOT EXISTS vault_syncs (
    id              bigserial PRIMARY KEY,
    repo            text NOT NULL,
    branch          text NOT NULL,
    trigger         text NOT NULL,        -- sensor | cli | hook
    mode            text NOT NULL CHECK (mode IN ('incremental', 'full')),
    reason          text,                 -- why a full comparison (missing cursor, force-push, --full)
    from_commit     text,
    to_commit       text NOT NULL,
    requested       integer NOT NULL DEFAULT 0,   -- notes sent to the vault_note_sections asset
    renamed         integer NOT NULL DEFAULT 0,
    removed         integer NOT NULL DEFAULT 0,
    skipped         jsonb NOT NULL DEFAULT '{}'::jsonb,  -- path -> reason (attachments, .base, .canvas)
    runs_requested  integer NOT NULL DEFAULT 0,
    runs_done       integer NOT NULL DEFAULT 0,
    files_processed integer NOT NULL DEFAULT 0,
    chunks_indexed  integer NOT NULL DEFAULT 0,
    failed          integer NOT NULL DEFAULT 0,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX IF NOT EXISTS vault_syncs_repo_idx ON vault_syncs (repo, branch, id);
-- a sync whose runs all ended and some failed: the sensor abandons it and
-- retries from vault_state.last_commit (the last fully indexed commit)
ALTER TABLE vault_syncs ADD COLUMN IF NOT EXISTS abandoned_at timestamptz;
