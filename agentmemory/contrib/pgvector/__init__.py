"""pgvector for agentmemory's recall: vector columns and HNSW indexes on PostgreSQL.

Add ``"agentmemory.contrib.pgvector"`` to ``INSTALLED_APPS`` (after ``"agentmemory"``) on a
PostgreSQL database where the ``vector`` extension is available, run ``migrate`` (its first
migration runs ``CREATE EXTENSION IF NOT EXISTS vector``, as pgvector-python's
``VectorExtension`` does) and set ``AGENTMEMORY["RECALL_BACKEND"] = "pgvector"``. Without this
app, or on another database, the ``"pgvector"`` backend ranks by exact cosine like
``"embedding"``. See ``docs/longterm.md``.
"""
