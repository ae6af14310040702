"""The storage floor: hand-written SQL and database-specific machinery, in one place.

Everything above it (the context window builder, the chat history, recall) asks the models
and the ORM for what the ORM does well, and calls this package for the statements that run
on every model call, where the ORM's cost would be several times the database's own work
(measured in ``docs/benchmarks.md``):

* ``window``: the window's read statements (the head statement, later pages of the tail,
  the gap probe, what a window leaves out) and their typed rows;
* ``rows``: decoding those rows into ``ChatMessage`` objects and ``RowMeta`` tuples;
* ``append``: the one-statement appends on PostgreSQL and the rule that pins the leading
  system messages, in SQL and in Python;
* ``functions``: the names and calls of the window's statements as PostgreSQL server-side
  functions (migration 0027 creates them);
* ``connection``: the cursor that prepares statements where the operator allows it.

This package imports only ``agentmemory.models``, ``agentmemory.messages``,
``agentmemory.conf`` (settings), Django and the database driver; nothing in it imports a
module above it (``docs/architecture.md``).
"""
