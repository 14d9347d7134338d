"""Agent memory: index / search / get / forget through the one search path,
with identities from the transport and scopes enforced in SQL."""

from serving.memory.identity import (IdentityError, IdentityMap, env_identity, load_identities,
                                     parse_identities)
from serving.memory.store import forget_memory, get_memory, index_memory, search_memory
from serving.memory.validation import MAX_CONTENT_CHARS, MemoryInputError, MemoryNotFound, parse_memory_filter
from serving.search.types import Viewer

# The error type was called MemoryError, which shadowed the builtin in every module
# that imported it; the old name stays importable from here for callers written
# against it.
MemoryError = MemoryInputError  # noqa: A001

__all__ = ["IdentityError", "IdentityMap", "MAX_CONTENT_CHARS", "MemoryError", "MemoryInputError", "MemoryNotFound",
           "Viewer", "env_identity", "forget_memory", "get_memory", "index_memory", "load_identities",
           "parse_identities", "parse_memory_filter", "search_memory"]
