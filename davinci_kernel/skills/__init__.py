"""① select and ⑦ summarize → verify → admit: the skill library the three agents share.

Modules: ``schema`` (what a valid skill is), ``store`` (SQLite, versions per step,
JSONL exchange), ``bm25`` (code-aware tokenizer, index, task queries), ``select``
(BM25 candidates and their metadata list for the selection agent), ``admit`` (filter, dedup,
verification, staging; the only writer during training), ``markdown`` (skills as
editable files), ``seed_build`` / ``run_examples`` (the bundled seed library and
its runnable examples), ``commands`` (``dvk skills ...``).
"""
