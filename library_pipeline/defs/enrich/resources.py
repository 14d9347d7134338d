"""The text-generation backend as a Dagster resource (serving.generation does
the work, so the pipeline and any serving-side use share one client).

No `from __future__ import annotations`: Dagster reads resource annotations at
definition time.
"""

from typing import Optional

import dagster as dg
from pydantic import Field

from serving.generation import TextGenerator, load_generator
from serving.settings import Settings


class GeneratorResource(dg.ConfigurableResource):
    """LLM for abstractive summaries and typed graph extraction: `none` (offline
    extractive / NER paths), `ollama` (/api/chat) or `openai` (/v1/chat/completions)."""

    backend: str = Field(default="none", description="none | ollama | openai (LIBRARY_LLM_BACKEND)")
    model: str = Field(default="", description="Chat model name (LIBRARY_LLM_MODEL).")
    url: str = Field(default="", description="Server root (LIBRARY_LLM_URL); empty = the backend's default.")
    timeout: float = Field(default=120.0, description="Seconds per request (LIBRARY_LLM_TIMEOUT).")
    retries: int = Field(default=3, description="Retries with exponential backoff on transport errors / 5xx.")

    @classmethod
    def from_settings(cls, settings: Settings) -> "GeneratorResource":
        url = settings.llm_url or (settings.ollama_url if settings.llm_backend == "ollama" else "")
        return cls(backend=settings.llm_backend, model=settings.llm_model or "", url=url,
                   timeout=settings.llm_timeout)

    def get(self) -> Optional[TextGenerator]:
        return load_generator(self.backend, self.model or None, self.url or None, timeout=self.timeout,
                              retries=self.retries)
