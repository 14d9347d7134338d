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
    kind         text NOT NULL DEFAULT 'text' CHECK (kind IN ('text', 'toc')),
    page_start   integer,
    page_end     integer,
    heading      text,
    content      text NOT NULL,
    content_hash text NOT NULL,
    PRIMARY KEY (document_id, ordinal)
);

-- Everything searchable: verbatim chunks (summary_level = 0), RAPTOR
-- summaries (> 0), vault note sections, memory artifacts.
CREATE TABLE IF NOT EXISTS passages (
    id             bigserial PRIMARY KEY,
    document_id    bigint REFERENCES documents(id) ON DELETE CASCADE,  -- NULL for memories
    source         text NOT NULL DEFAULT 'library' CHECK (source IN ('library', 'vault', 'memory')),
    ordinal        integer NOT NULL DEFAULT 0,
    kind           text NOT NULL DEFAULT 'text',   -- text | toc | summary | note | memory
    summary_level  integer NOT NULL DEFAULT 0,
    summarises     bigint[],                      -- passage ids a summary covers
    page_start     integer,
    page_end       integer,
    heading        text,
    content        text NOT NULL,
    content_hash   text NOT NULL,                 -- sha256 of content
    embed_hash     text,                          -- sha256 of the exact text fed to the embedder (with prefix)
    ts_config      regconfig NOT NULL DEFAULT 'simple',
    -- one definition of a passage's tsvector, computed by Postgres with the
    -- passage's own configuration, so a Russian book is stemmed as Russian.
    tsv            tsvector GENERATED ALWAYS AS (to_tsvector(ts_config, content)) STORED,
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

CREATE INDEX IF NOT EXISTS passages_document_idx ON passages (document_id, ordinal);
CREATE INDEX IF NOT EXISTS passages_tsv_idx ON passages USING gin (tsv);
CREATE INDEX IF NOT EXISTS passages_reuse_idx ON passages (embed_model, embed_hash);
CREATE INDEX IF NOT EXISTS documents_status_idx ON documents (source, status);

-- Per-model vector indexes. HNSW applies a WHERE clause after finding its
-- nearest neighbours; the reference system's summaries (1 in 15 rows) were
-- invisible for a week behind a `summary_level > 0` filter on the main index.
-- So summaries get their own partial index, and the main one covers only
-- verbatim rows. Queries must repeat the predicate literally
-- (embed_model = '<model>') for the planner to pick these indexes.
CREATE OR REPLACE FUNCTION ensure_vector_indexes(p_model text, p_dims integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    tag text := substr(md5(p_model), 1, 10);
BEGIN
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON passages USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops) '
        'WITH (m = 16, ef_construction = 64) WHERE embed_model = %L AND summary_level = 0',
        'passages_hnsw_' || tag, p_dims, p_model);
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON passages USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops) '
        'WITH (m = 16, ef_construction = 64) WHERE embed_model = %L AND summary_level > 0',
        'passages_hnsw_summary_' || tag, p_dims, p_model);
END;
$$;

-- Which embedding model search uses; a re-embed migration switches it in one step.
CREATE TABLE IF NOT EXISTS settings (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);

-- Corpus document frequency per lexeme and text-search configuration, for the
-- keyword lane: AND the rarest query lexemes, treat frequent ones as noise.
CREATE TABLE IF NOT EXISTS lexeme_df (
    ts_config regconfig NOT NULL,
    lexeme    text NOT NULL,
    df        integer NOT NULL,
    PRIMARY KEY (ts_config, lexeme)
);
CREATE TABLE IF NOT EXISTS lexeme_df_totals (
    ts_config  regconfig PRIMARY KEY,
    passages   integer NOT NULL,
    avg_length double precision NOT NULL,
    refreshed_at timestamptz NOT NULL DEFAULT now()
);

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

-- Every search an agent or the CLI ran: the reference system's most useful
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
ALTER TABLE passages ADD COLUMN IF NOT EXISTS cold boolean NOT NULL DEFAULT false;  -- memory retention tier
CREATE INDEX IF NOT EXISTS passages_memory_idx ON passages (memory_id) WHERE memory_id IS NOT NULL;

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
