"""Hash-partitioned message history on PostgreSQL, for very large installs (opt-in).

Add ``"agentmemory.contrib.partitioning"`` to ``INSTALLED_APPS`` (after ``"agentmemory"``),
set ``AGENTMEMORY_PARTITIONS`` (the number of hash partitions, default 16) and run
``migrate``: the app's one migration rebuilds ``agentmemory_message`` (with its full-text
column and index) as a table ``PARTITION BY HASH (conversation_id)``, copying the rows that
are there. ``migrate agentmemory_partitioning zero`` rebuilds the plain table. PostgreSQL
only: on any other database a system check (``agentmemory_partitioning.E001``) refuses it.
What changes and what it costs is in ``docs/operations.md`` ("Partitioned history").
"""
