# The code location image: the Dagster definitions (library_pipeline), the
# search side they score (serving), schema.sql, Tesseract and the bundled
# embedder. The same image serves as the user-code deployment (gRPC code
# server) and as the run-worker image K8sRunLauncher starts per run.
#
#   docker build -t library-pipeline:0.1.0 .
#   docker run --rm -p 4000:4000 -e LIBRARY_DB_DSN=postgresql://… library-pipeline:0.1.0
#
# Not built on the development machines (no Docker engine there): see
# docs/deployment.md for what was validated instead.
FROM python:3.11-slim

# Tesseract reads scanned pages; `rus+eng` reads both (each alone garbles the other)
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng tesseract-ocr-rus \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    TESSDATA_PREFIX=/usr/share/tesseract-ocr/5/tessdata \
    DAGSTER_HOME=/opt/dagster/dagster_home \
    LIBRARY_HOME=/var/lib/library \
    LIBRARY_DIR=/data/library

# torch first, pinned, CPU wheel: a bare `torch` requirement (sentence-transformers
# has one) would pull a multi-GB CUDA build.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /opt/library-pipeline
# dependencies in their own layer: code edits don't reinstall them; the `pipeline`
# extra is Dagster, spaCy, natasha, celery (the base alone is the MCP server's)
COPY pyproject.toml README.md ./
RUN mkdir -p library_pipeline serving && touch library_pipeline/__init__.py serving/__init__.py \
    && pip install -e '.[pipeline]' "dagster-k8s==0.29.27" \
    && rm -rf library_pipeline serving

COPY schema.sql workspace.yaml ./
COPY serving ./serving
COPY library_pipeline ./library_pipeline
# editable, so serving.db finds schema.sql beside the packages as it does in a checkout
RUN pip install --no-deps -e . \
    && mkdir -p "$DAGSTER_HOME" "$LIBRARY_HOME" "$LIBRARY_DIR" \
    && python -c "import library_pipeline.definitions"

EXPOSE 4000
# The Helm chart overrides this with `dagster code-server start` + codeServerArgs
# (deploy/k8s/values.yaml); the default runs the same server for docker run.
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "4000", \
     "-m", "library_pipeline.definitions", "-a", "defs"]
