"""Library files as dynamic partitions. Which files count and their keys are ingest's
domain rules (library_pipeline.ingest.files, library_pipeline.documents.partition_key_for);
they are re-exported here for the definitions that name a partition by its file."""

from __future__ import annotations

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.ingest.extract.common import SUPPORTED_SUFFIXES
from library_pipeline.ingest.files import display_path, fs_path, is_candidate, scan_library
from library_pipeline.documents import partition_key_for

__all__ = ["SUPPORTED_SUFFIXES", "display_path", "fs_path", "is_candidate", "library_files_partitions",
           "partition_key_for", "scan_library"]

library_files_partitions = dg.DynamicPartitionsDefinition(name=launch.LIBRARY_FILES)
