"""Agent memory: index / search / get / forget through the one search path,
with identities from the transport and scopes enforced in SQL."""

from serving.memory.identity import (IdentityError, IdentityMap, env_identity, load_identities,
                                     parse_identities)
from serving.memory.store import (MAX_CONTENT_CHARS, MemoryError, MemoryNotFound, forget_memory, get_memory,
                                  index_memory, parse_memory_filter, search_memory)
from serving.search.types import Viewer

__all__ = ["IdentityError", "IdentityMap", "MAX_CONTENT_CHARS", "MemoryError", "MemoryNotFound", "Viewer",
           "env_identity", "forget_memory", "get_memory", "index_memory", "load_identities", "parse_identities",
           "parse_memory_filter", "search_memory"]
