"""The text-generation backend as a Dagster resource (serving.generation does
the work, so the pipeline and any serving-side use share one client).
"""

from typing import Optional

from library_pipeline.resources import SettingsResource
from serving.generation import TextGenerator, load_generator


class GeneratorResource(SettingsResource):
    """LLM for abstractive summaries and typed graph extraction: `none` (offline
    extractive / NER paths), `ollama` (/api/chat) or `openai` (/v1/chat/completions);
    the settings' llm_* values (LIBRARY_LLM_*), held in the one settings resource."""

    def get(self) -> Optional[TextGenerator]:
        s = self.settings
        url = s.llm_url or (s.ollama_url if s.llm_backend == "ollama" else None)
        return load_generator(s.llm_backend, s.llm_model, url, timeout=s.llm_timeout, retries=s.llm_retries)
