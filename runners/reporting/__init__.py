"""Turning result stores into the numbers and pages people read, one module per job:

    scan       DuckDB over the JSONL stores: projection, de-duplication, filters, type checks
    load       the records the tables read (slim mappings, keys computed in DuckDB); `bench comm` records
    keys       the configuration key, written once, as Python and as SQL (--where)
    aggregate  groups and summaries: throughput, memory, scaling, Table 1, I/O and runtime pairs
    why        why it does not scale: the lost time per step, split, and its verdict
    network    what `bench comm` records predict and show
    render     the report's Markdown, rendered to HTML by markdown-it-py

Pure data but `render`: no plotting, no printing. `benchrun report`, `compare`, `compare-runtimes`
and `export` (runners/commands/) build on these. Definitions: docs/reports.md.
"""
