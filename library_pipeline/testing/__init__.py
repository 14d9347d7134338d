"""Scenarios shared by the test suite (library_pipeline_tests) and the benchmarks
(benchmarks/): the reliability tests run the same scenarios the benchmarks
measure, shorter. A package module rather than a benchmark script loaded by path,
so both import it the same way, from a checkout or an installed package.

- `crash`: the ingest SIGKILLed at chosen points by a forking zygote, and the
  invariants that must hold after each kill;
- `hostile_corpus`: files built to break an ingest, with what must happen to each;
- `load`: concurrent MCP clients beside an ingest and the memory upkeep;
- `sample_library`: a small real library inserted as rows with real embeddings;
- `metrics`: the chunk-size benchmark's nDCG.
"""
