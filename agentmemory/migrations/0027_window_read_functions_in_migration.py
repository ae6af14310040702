"""PostgreSQL: the window's read statements as server-side functions under fixed names
(``agentmemory.store.functions`` calls them), created here from the statement text frozen in
this module.

Each statement is the one ``agentmemory.store.window`` sends as text otherwise (the head
statement in four variants, with or without the pinned prompt, ``p``/``n``, and with tool
results capped or not, ``c``/``u``; and the gap probe), with its parameters written ``$1``,
``$2`` ... in the order of the function's arguments, and the result columns it returns on
the tables as migrated up to here. ``tests/test_head_function.py`` checks that the live
statements still read as the text here: a release that changes one ships a migration of its
own that replaces the functions (as does one that changes the type of a column they return).

Until this migration a ``post_migrate`` receiver installed them after every ``migrate``,
under names that carried a hash of their text (``agentmemory_window_head_pu_<hash>``).
Going forward this migration drops every ``agentmemory_window_...`` function of any earlier
version (a process of the previous release that still calls one sends its statements as
text from then on) and creates the five. Going back drops the five; migration 0021 then
drops whatever else of the family is left. Nothing on other databases."""

from django.db import migrations

#: the arguments of the head statement's functions: id, system, room, half, triple,
#: max_page, tool, cap
HEAD_ARGUMENTS = "bigint, text, bigint, bigint, bigint, bigint, text, bigint"
#: the arguments of the gap probe's function: id, system, summary, before, pinned,
#: pinned_last, pending (the seqs of the AI messages asked about)
GAP_ARGUMENTS = "bigint, text, bigint, bigint, bigint, bigint, bigint[]"
#: the columns the statements return, as PostgreSQL resolves their ``UNION ALL``
HEAD_RESULT = (
    "c0 integer, c1 bigint, c2 character varying, c3 bigint, c4 bigint, c5 character varying, "
    "c6 jsonb, c7 bigint, c8 character varying, c9 bigint, c10 text, c11 jsonb, c12 jsonb"
)
GAP_RESULT = "c0 integer, c1 bigint, c2 bigint, c3 bigint, c4 bigint, c5 jsonb"

#: the statement of each function, by the code in its name (``agentmemory_window_<code>``)
STATEMENTS = {
    "head_nu": (
        'SELECT 3, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", CASE WHEN running <= $3 THEN 1 ELSE 0 END, CASE WHEN running <= $3 THEN "content" '
        'END, CASE WHEN running <= $3 THEN "parts" END, CASE WHEN running <= $3 AND "role" = \'ai\' '
        'THEN ("metadata" -> \'thinking\') END FROM (SELECT "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", "content", "parts", "metadata", '
        'SUM("token_count") OVER w AS running, "token_count" AS tok, MIN(CASE WHEN "role" = \'tool\' '
        'THEN "exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE "conversation_id" '
        '= $1 WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT '
        'COALESCE((SELECT LEAST(CASE WHEN "agentmemory_conversation"."message_count" <= 0 THEN 16 '
        'ELSE GREATEST(16, CASE WHEN "agentmemory_conversation"."stored_tokens" <= '
        '"agentmemory_conversation"."message_count" THEN $4 ELSE ($5 * '
        '"agentmemory_conversation"."message_count" + 2 * "agentmemory_conversation"."stored_tokens" '
        '- 1) / (2 * "agentmemory_conversation"."stored_tokens") END + 8) END, $6) FROM '
        '"agentmemory_conversation" WHERE "id" = $1), 0)) tail WHERE running - tok <= $3 OR "seq" >= '
        'reach UNION ALL SELECT 0, "message_count", NULL, "human_message_count", "stored_tokens", '
        'NULL, NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", NULL, NULL, '
        '"pending_tool_calls" FROM "agentmemory_conversation" WHERE "id" = $1 UNION ALL SELECT 1, '
        '"through_seq", NULL, "token_count", "human_messages_covered", NULL, NULL, "id", '
        '"token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = (SELECT '
        '"summary_id" FROM "agentmemory_conversation" WHERE "id" = $1)'
    ),
    "head_nc": (
        'SELECT 3, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", CASE WHEN running <= $3 THEN 1 ELSE 0 END, CASE WHEN running <= $3 THEN "content" '
        'END, CASE WHEN running <= $3 THEN "parts" END, CASE WHEN running <= $3 AND "role" = \'ai\' '
        'THEN ("metadata" -> \'thinking\') END FROM (SELECT "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", "content", "parts", "metadata", '
        'SUM(CASE WHEN "role" = $7 AND "token_count" > $8 THEN $8 ELSE "token_count" END) OVER w AS '
        'running, CASE WHEN "role" = $7 AND "token_count" > $8 THEN $8 ELSE "token_count" END AS tok,'
        ' MIN(CASE WHEN "role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 WINDOW w AS (ORDER BY "seq" DESC ROWS '
        'UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT COALESCE((SELECT LEAST(CASE WHEN '
        '"agentmemory_conversation"."message_count" <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN '
        '"agentmemory_conversation"."stored_tokens" <= "agentmemory_conversation"."message_count" '
        'THEN $4 ELSE ($5 * "agentmemory_conversation"."message_count" + 2 * '
        '"agentmemory_conversation"."stored_tokens" - 1) / (2 * '
        '"agentmemory_conversation"."stored_tokens") END + 8) END, $6) FROM '
        '"agentmemory_conversation" WHERE "id" = $1), 0)) tail WHERE running - tok <= $3 OR "seq" >= '
        'reach UNION ALL SELECT 0, "message_count", NULL, "human_message_count", "stored_tokens", '
        'NULL, NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", NULL, NULL, '
        '"pending_tool_calls" FROM "agentmemory_conversation" WHERE "id" = $1 UNION ALL SELECT 1, '
        '"through_seq", NULL, "token_count", "human_messages_covered", NULL, NULL, "id", '
        '"token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = (SELECT '
        '"summary_id" FROM "agentmemory_conversation" WHERE "id" = $1)'
    ),
    "head_pu": (
        'SELECT 3, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", CASE WHEN running <= $3 THEN 1 ELSE 0 END, CASE WHEN running <= $3 THEN "content" '
        'END, CASE WHEN running <= $3 THEN "parts" END, CASE WHEN running <= $3 AND "role" = \'ai\' '
        'THEN ("metadata" -> \'thinking\') END FROM (SELECT "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", "content", "parts", "metadata", '
        'SUM("token_count") OVER w AS running, "token_count" AS tok, MIN(CASE WHEN "role" = \'tool\' '
        'THEN "exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE "conversation_id" '
        '= $1 WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT '
        'COALESCE((SELECT LEAST(CASE WHEN "agentmemory_conversation"."message_count" <= 0 THEN 16 '
        'ELSE GREATEST(16, CASE WHEN "agentmemory_conversation"."stored_tokens" <= '
        '"agentmemory_conversation"."message_count" THEN $4 ELSE ($5 * '
        '"agentmemory_conversation"."message_count" + 2 * "agentmemory_conversation"."stored_tokens" '
        '- 1) / (2 * "agentmemory_conversation"."stored_tokens") END + 8) END, $6) FROM '
        '"agentmemory_conversation" WHERE "id" = $1), 0)) tail WHERE running - tok <= $3 OR "seq" >= '
        'reach UNION ALL SELECT 2, "seq", "role", "token_count", "exchange_seq", "tool_call_id", '
        '"tool_calls", "id", "name", 1, "content", "parts", "metadata" FROM "agentmemory_message" '
        'WHERE "conversation_id" = $1 AND "seq" BETWEEN (SELECT "pinned_seq" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) AND (SELECT COALESCE("pinned_last_seq", '
        '"pinned_seq") FROM "agentmemory_conversation" WHERE "id" = $1) AND "role" = $2 UNION ALL '
        'SELECT 0, "message_count", NULL, "human_message_count", "stored_tokens", NULL, NULL, "id", '
        'CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", NULL, NULL, "pending_tool_calls" FROM '
        '"agentmemory_conversation" WHERE "id" = $1 UNION ALL SELECT 1, "through_seq", NULL, '
        '"token_count", "human_messages_covered", NULL, NULL, "id", "token_counter", 1, "text", NULL,'
        ' NULL FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1)'
    ),
    "head_pc": (
        'SELECT 3, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", CASE WHEN running <= $3 THEN 1 ELSE 0 END, CASE WHEN running <= $3 THEN "content" '
        'END, CASE WHEN running <= $3 THEN "parts" END, CASE WHEN running <= $3 AND "role" = \'ai\' '
        'THEN ("metadata" -> \'thinking\') END FROM (SELECT "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", "content", "parts", "metadata", '
        'SUM(CASE WHEN "role" = $7 AND "token_count" > $8 THEN $8 ELSE "token_count" END) OVER w AS '
        'running, CASE WHEN "role" = $7 AND "token_count" > $8 THEN $8 ELSE "token_count" END AS tok,'
        ' MIN(CASE WHEN "role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 WINDOW w AS (ORDER BY "seq" DESC ROWS '
        'UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT COALESCE((SELECT LEAST(CASE WHEN '
        '"agentmemory_conversation"."message_count" <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN '
        '"agentmemory_conversation"."stored_tokens" <= "agentmemory_conversation"."message_count" '
        'THEN $4 ELSE ($5 * "agentmemory_conversation"."message_count" + 2 * '
        '"agentmemory_conversation"."stored_tokens" - 1) / (2 * '
        '"agentmemory_conversation"."stored_tokens") END + 8) END, $6) FROM '
        '"agentmemory_conversation" WHERE "id" = $1), 0)) tail WHERE running - tok <= $3 OR "seq" >= '
        'reach UNION ALL SELECT 2, "seq", "role", "token_count", "exchange_seq", "tool_call_id", '
        '"tool_calls", "id", "name", 1, "content", "parts", "metadata" FROM "agentmemory_message" '
        'WHERE "conversation_id" = $1 AND "seq" BETWEEN (SELECT "pinned_seq" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) AND (SELECT COALESCE("pinned_last_seq", '
        '"pinned_seq") FROM "agentmemory_conversation" WHERE "id" = $1) AND "role" = $2 UNION ALL '
        'SELECT 0, "message_count", NULL, "human_message_count", "stored_tokens", NULL, NULL, "id", '
        'CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", NULL, NULL, "pending_tool_calls" FROM '
        '"agentmemory_conversation" WHERE "id" = $1 UNION ALL SELECT 1, "through_seq", NULL, '
        '"token_count", "human_messages_covered", NULL, NULL, "id", "token_counter", 1, "text", NULL,'
        ' NULL FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1)'
    ),
    "gap": (
        'SELECT 0, (SELECT "seq" FROM "agentmemory_message" WHERE "conversation_id" = $1 ORDER BY '
        '"seq" LIMIT 1), (SELECT SUM("token_count") FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 AND "seq" BETWEEN $5 AND $6 AND "role" = $2), (SELECT "first_seq" '
        'FROM "agentmemory_summary" WHERE "id" = $3), (SELECT "tokens_covered" FROM '
        '"agentmemory_summary" WHERE "id" = $3), NULL UNION ALL SELECT 2, "seq", "token_count", NULL,'
        ' NULL, "tool_calls" FROM "agentmemory_message" WHERE "conversation_id" = $1 AND "seq" = '
        'ANY($7) UNION ALL SELECT 1, "seq", "token_count", NULL, NULL, NULL FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS'
        ' NULL AND "seq" < $4'
    ),
}


def _signature(code):  # type: ignore[no-untyped-def]
    return f"agentmemory_window_{code}({GAP_ARGUMENTS if code == 'gap' else HEAD_ARGUMENTS})"


def _create(code):  # type: ignore[no-untyped-def]
    result = GAP_RESULT if code == "gap" else HEAD_RESULT
    # STABLE: the function only reads, within the snapshot of the statement calling it.
    return (
        f"CREATE FUNCTION {_signature(code)} RETURNS TABLE ({result}) LANGUAGE plpgsql STABLE "
        f"AS $agentmemory$ BEGIN RETURN QUERY {STATEMENTS[code]}; END $agentmemory$"
    )


#: the window functions of every release (``agentmemory_window_head_{n,p}{u,c}`` and
#: ``agentmemory_window_gap``, with or without a hash suffix) in the current schema: no other
#: function, and none of another schema; the hash-named ones of the ``post_migrate`` receiver
#: included
DROP_EVERY_VERSION = r"""
DO $agentmemory$
DECLARE
    stale regprocedure;
BEGIN
    FOR stale IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.proname ~ '^agentmemory_window_(head_[np][uc]|gap)(_[0-9a-f]{12})?$'
        AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE 'DROP FUNCTION ' || stale::text;
    END LOOP;
END
$agentmemory$
"""


class RunSQLOnPostgreSQL(migrations.RunSQL):
    """``RunSQL`` on PostgreSQL only (PL/pgSQL); on other databases it does nothing."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0026_message_fulltext_no_pending_list"),
    ]

    operations = [
        RunSQLOnPostgreSQL(
            sql=[DROP_EVERY_VERSION, *(_create(code) for code in STATEMENTS)],
            reverse_sql=[f"DROP FUNCTION IF EXISTS {_signature(code)}" for code in STATEMENTS],
            elidable=False,
        ),
    ]
