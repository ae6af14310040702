"""PostgreSQL: the window's head functions read the conversation's current summary only where it
is one of its own summaries, and return the stored summary id with the conversation row
(``agentmemory.store.window._head_sql``).

The head statement read the summary, and the floor the history starts after, by the
conversation row's ``summary_id`` alone. A ``summary_id`` written by hand (raw SQL, a data
migration, a restore of one table) that named another conversation's summary made every window
of the conversation send that conversation's summary text, possibly another user's, to the
model, and start after that summary's ``through_seq``. Both lookups now also ask for the
summary's ``conversation_id`` to be the conversation's (the lookup stays one on the summary's
primary key); and the conversation row carries its ``summary_id`` (as text, in the column of a
tool call id, which the row left empty), so that the builder tells a row whose summary is
another conversation's from one without a summary and refuses the window
(``agentmemory.context.bookkeeping.check_summary``), with no statement of its own.

The arguments and the result columns are those of migration 0028, so the four head functions
are replaced in place (``CREATE OR REPLACE``) under their fixed names; the gap probe's is
unchanged. ``tests/test_head_function.py`` checks that the live statements read as the text
here. Going back restores migration 0037's statements. Nothing on other databases."""

from importlib import import_module

from django.db import migrations

_0027 = import_module("agentmemory.migrations.0027_window_read_functions_in_migration")
_0030 = import_module("agentmemory.migrations.0030_window_head_conversation_once")
_0037 = import_module("agentmemory.migrations.0037_window_head_tool_error_flag")

#: the statement of each head function, by the code in its name (``agentmemory_window_<code>``)
STATEMENTS = {
    "head_nu": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 '
        'ELSE 0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" '
        "END, CASE WHEN running <= $3 THEN CASE WHEN \"role\" = 'ai' THEN (\"metadata\" -> 'thinking') WHEN"
        " \"role\" = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END "
        'FROM (SELECT "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id",'
        ' "name", "content", "parts", "metadata", SUM("token_count") OVER w AS running, "token_count" '
        'AS tok, MIN(CASE WHEN "role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT '
        '"through_seq" FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) AND '
        '"conversation_id" = $1), 0), COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM '
        'conv), 0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC '
        'LIMIT COALESCE((SELECT CAST(LEAST(CASE WHEN conv."message_count" <= 0 THEN 16 ELSE '
        'GREATEST(16, CASE WHEN conv."stored_tokens" <= conv."message_count" THEN $4 ELSE div($5 * '
        'CAST(conv."message_count" AS numeric) + 2 * CAST(conv."stored_tokens" AS numeric) - 1, 2 * '
        'CAST(conv."stored_tokens" AS numeric)) END + 8) END, $6) AS bigint) FROM conv), 0)) tail WHERE'
        ' running - tok <= $3 OR "seq" >= reach UNION ALL SELECT 0, "message_count", CAST((SELECT "seq"'
        ' FROM "agentmemory_message" WHERE "conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS '
        'varchar(20)), "human_message_count", "stored_tokens", CAST("summary_id" AS varchar(20)), NULL,'
        ' "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", NULL, NULL, "pending_tool_calls" '
        'FROM conv UNION ALL SELECT 1, "through_seq", CAST("first_seq" AS varchar(20)), "token_count", '
        '"human_messages_covered", CAST("tokens_covered" AS varchar(20)), NULL, "id", "token_counter", '
        '1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) '
        'AND "conversation_id" = $1 UNION ALL SELECT * FROM (SELECT -1, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", 0, CAST(NULL AS text), CAST(NULL '
        'AS jsonb), CAST(NULL AS jsonb) FROM "agentmemory_message" WHERE "conversation_id" = $1 AND '
        '"role" = \'tool\' AND "exchange_seq" IS NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
    "head_nc": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 '
        'ELSE 0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" '
        "END, CASE WHEN running <= $3 THEN CASE WHEN \"role\" = 'ai' THEN (\"metadata\" -> 'thinking') WHEN"
        " \"role\" = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END "
        'FROM (SELECT "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id",'
        ' "name", "content", "parts", "metadata", SUM(CASE WHEN "role" = $7 AND "token_count" > $8 THEN'
        ' CAST($8 AS integer) ELSE "token_count" END) OVER w AS running, CASE WHEN "role" = $7 AND '
        '"token_count" > $8 THEN CAST($8 AS integer) ELSE "token_count" END AS tok, MIN(CASE WHEN '
        '"role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT "through_seq" FROM '
        '"agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) AND "conversation_id" = '
        '$1), 0), COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM conv), 0)) WINDOW w '
        'AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT COALESCE((SELECT '
        'CAST(LEAST(CASE WHEN conv."message_count" <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN '
        'conv."stored_tokens" <= conv."message_count" THEN $4 ELSE div($5 * CAST(conv."message_count" '
        'AS numeric) + 2 * CAST(conv."stored_tokens" AS numeric) - 1, 2 * CAST(conv."stored_tokens" AS '
        'numeric)) END + 8) END, $6) AS bigint) FROM conv), 0)) tail WHERE running - tok <= $3 OR "seq"'
        ' >= reach UNION ALL SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" '
        'WHERE "conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count", '
        '"stored_tokens", CAST("summary_id" AS varchar(20)), NULL, "id", CAST("pinned_last_seq" AS '
        'varchar(20)), "pinned_seq", NULL, NULL, "pending_tool_calls" FROM conv UNION ALL SELECT 1, '
        '"through_seq", CAST("first_seq" AS varchar(20)), "token_count", "human_messages_covered", '
        'CAST("tokens_covered" AS varchar(20)), NULL, "id", "token_counter", 1, "text", NULL, NULL FROM'
        ' "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) AND "conversation_id" = $1'
        ' UNION ALL SELECT * FROM (SELECT -1, "seq", "role", "token_count", "exchange_seq", '
        '"tool_call_id", "tool_calls", "id", "name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), '
        'CAST(NULL AS jsonb) FROM "agentmemory_message" WHERE "conversation_id" = $1 AND "role" = '
        '\'tool\' AND "exchange_seq" IS NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
    "head_pu": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 '
        'ELSE 0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" '
        "END, CASE WHEN running <= $3 THEN CASE WHEN \"role\" = 'ai' THEN (\"metadata\" -> 'thinking') WHEN"
        " \"role\" = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END "
        'FROM (SELECT "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id",'
        ' "name", "content", "parts", "metadata", SUM("token_count") OVER w AS running, "token_count" '
        'AS tok, MIN(CASE WHEN "role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT '
        '"through_seq" FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) AND '
        '"conversation_id" = $1), 0), COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM '
        'conv), 0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC '
        'LIMIT COALESCE((SELECT CAST(LEAST(CASE WHEN conv."message_count" <= 0 THEN 16 ELSE '
        'GREATEST(16, CASE WHEN conv."stored_tokens" <= conv."message_count" THEN $4 ELSE div($5 * '
        'CAST(conv."message_count" AS numeric) + 2 * CAST(conv."stored_tokens" AS numeric) - 1, 2 * '
        'CAST(conv."stored_tokens" AS numeric)) END + 8) END, $6) AS bigint) FROM conv), 0)) tail WHERE'
        ' running - tok <= $3 OR "seq" >= reach UNION ALL SELECT 2, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", 1, "content", "parts", "metadata" '
        'FROM "agentmemory_message" WHERE "conversation_id" = $1 AND "seq" BETWEEN (SELECT "pinned_seq"'
        ' FROM conv) AND (SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM conv) AND "role" = $2 '
        'UNION ALL SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count", '
        '"stored_tokens", CAST("summary_id" AS varchar(20)), NULL, "id", CAST("pinned_last_seq" AS '
        'varchar(20)), "pinned_seq", NULL, NULL, "pending_tool_calls" FROM conv UNION ALL SELECT 1, '
        '"through_seq", CAST("first_seq" AS varchar(20)), "token_count", "human_messages_covered", '
        'CAST("tokens_covered" AS varchar(20)), NULL, "id", "token_counter", 1, "text", NULL, NULL FROM'
        ' "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) AND "conversation_id" = $1'
        ' UNION ALL SELECT * FROM (SELECT -1, "seq", "role", "token_count", "exchange_seq", '
        '"tool_call_id", "tool_calls", "id", "name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), '
        'CAST(NULL AS jsonb) FROM "agentmemory_message" WHERE "conversation_id" = $1 AND "role" = '
        '\'tool\' AND "exchange_seq" IS NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
    "head_pc": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 '
        'ELSE 0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" '
        "END, CASE WHEN running <= $3 THEN CASE WHEN \"role\" = 'ai' THEN (\"metadata\" -> 'thinking') WHEN"
        " \"role\" = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END "
        'FROM (SELECT "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id",'
        ' "name", "content", "parts", "metadata", SUM(CASE WHEN "role" = $7 AND "token_count" > $8 THEN'
        ' CAST($8 AS integer) ELSE "token_count" END) OVER w AS running, CASE WHEN "role" = $7 AND '
        '"token_count" > $8 THEN CAST($8 AS integer) ELSE "token_count" END AS tok, MIN(CASE WHEN '
        '"role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT "through_seq" FROM '
        '"agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) AND "conversation_id" = '
        '$1), 0), COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM conv), 0)) WINDOW w '
        'AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT COALESCE((SELECT '
        'CAST(LEAST(CASE WHEN conv."message_count" <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN '
        'conv."stored_tokens" <= conv."message_count" THEN $4 ELSE div($5 * CAST(conv."message_count" '
        'AS numeric) + 2 * CAST(conv."stored_tokens" AS numeric) - 1, 2 * CAST(conv."stored_tokens" AS '
        'numeric)) END + 8) END, $6) AS bigint) FROM conv), 0)) tail WHERE running - tok <= $3 OR "seq"'
        ' >= reach UNION ALL SELECT 2, "seq", "role", "token_count", "exchange_seq", "tool_call_id", '
        '"tool_calls", "id", "name", 1, "content", "parts", "metadata" FROM "agentmemory_message" WHERE'
        ' "conversation_id" = $1 AND "seq" BETWEEN (SELECT "pinned_seq" FROM conv) AND (SELECT '
        'COALESCE("pinned_last_seq", "pinned_seq") FROM conv) AND "role" = $2 UNION ALL SELECT 0, '
        '"message_count", CAST((SELECT "seq" FROM "agentmemory_message" WHERE "conversation_id" = $1 '
        'ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count", "stored_tokens", '
        'CAST("summary_id" AS varchar(20)), NULL, "id", CAST("pinned_last_seq" AS varchar(20)), '
        '"pinned_seq", NULL, NULL, "pending_tool_calls" FROM conv UNION ALL SELECT 1, "through_seq", '
        'CAST("first_seq" AS varchar(20)), "token_count", "human_messages_covered", '
        'CAST("tokens_covered" AS varchar(20)), NULL, "id", "token_counter", 1, "text", NULL, NULL FROM'
        ' "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) AND "conversation_id" = $1'
        ' UNION ALL SELECT * FROM (SELECT -1, "seq", "role", "token_count", "exchange_seq", '
        '"tool_call_id", "tool_calls", "id", "name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), '
        'CAST(NULL AS jsonb) FROM "agentmemory_message" WHERE "conversation_id" = $1 AND "role" = '
        '\'tool\' AND "exchange_seq" IS NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
}


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0042_fact_first_remembered_at"),
    ]

    operations = [
        _0027.RunSQLOnPostgreSQL(
            sql=[_0030._replace(code, STATEMENTS) for code in STATEMENTS],
            reverse_sql=[_0030._replace(code, _0037.STATEMENTS) for code in _0037.STATEMENTS],
            elidable=False,
        ),
    ]
