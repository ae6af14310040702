"""PostgreSQL: the window's head functions carry a failed tool result's error flag.

The head statement read, of a message's metadata, only an ``ai`` row's thinking blocks, so a
window built from the database sent a failed tool call (``metadata["is_error"]``, which
``to_anthropic`` sends as the ``tool_result``'s ``"is_error": true`` and ``to_langchain`` as
``status="error"``) as a success. Its last column now holds, for the rows whose content is
read, what a converter sends of their metadata (``agentmemory.store.sent_metadata``): the
thinking subtree of an ``ai`` row as before, JSON ``true`` for a ``tool`` row whose
``is_error`` is ``true``, NULL for every other row.

The arguments and the result columns are those of migration 0028 (the last column is jsonb
as before), so the four head functions are replaced in place (``CREATE OR REPLACE``) under
their fixed names; the gap probe's is unchanged. ``tests/test_head_function.py`` checks that
the live statements read as the text here. Going back restores migration 0036's statements.
Nothing on other databases."""

from importlib import import_module

from django.db import migrations

_0027 = import_module("agentmemory.migrations.0027_window_read_functions_in_migration")
_0030 = import_module("agentmemory.migrations.0030_window_head_conversation_once")
_0036 = import_module("agentmemory.migrations.0036_window_head_page_size_in_numeric")

#: the statement of each head function, by the code in its name (``agentmemory_window_<code>``)
STATEMENTS = {
    "head_nu": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 ELSE '
        '0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" END, '
        'CASE WHEN running <= $3 THEN CASE WHEN "role" = \'ai\' THEN ("metadata" -> \'thinking\') WHEN "role"'
        " = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END FROM (SELECT"
        ' "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", "name", '
        '"content", "parts", "metadata", SUM("token_count") OVER w AS running, "token_count" AS tok, '
        'MIN(CASE WHEN "role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT '
        '"through_seq" FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv)), 0), '
        'COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM conv), 0)) WINDOW w AS (ORDER BY'
        ' "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT COALESCE((SELECT CAST(LEAST(CASE'
        ' WHEN conv."message_count" <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN conv."stored_tokens" <= '
        'conv."message_count" THEN $4 ELSE div($5 * CAST(conv."message_count" AS numeric) + 2 * '
        'CAST(conv."stored_tokens" AS numeric) - 1, 2 * CAST(conv."stored_tokens" AS numeric)) END + 8) '
        'END, $6) AS bigint) FROM conv), 0)) tail WHERE running - tok <= $3 OR "seq" >= reach UNION ALL '
        'SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" WHERE "conversation_id"'
        ' = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count", "stored_tokens", NULL, '
        'NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", NULL, NULL, '
        '"pending_tool_calls" FROM conv UNION ALL SELECT 1, "through_seq", CAST("first_seq" AS '
        'varchar(20)), "token_count", "human_messages_covered", CAST("tokens_covered" AS varchar(20)), '
        'NULL, "id", "token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = '
        '(SELECT "summary_id" FROM conv) UNION ALL SELECT * FROM (SELECT -1, "seq", "role", '
        '"token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", "name", 0, CAST(NULL AS '
        'text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS NULL ORDER BY "seq" DESC LIMIT '
        "17) orphans"
    ),
    "head_nc": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 ELSE '
        '0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" END, '
        'CASE WHEN running <= $3 THEN CASE WHEN "role" = \'ai\' THEN ("metadata" -> \'thinking\') WHEN "role"'
        " = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END FROM (SELECT"
        ' "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", "name", '
        '"content", "parts", "metadata", SUM(CASE WHEN "role" = $7 AND "token_count" > $8 THEN CAST($8 AS'
        ' integer) ELSE "token_count" END) OVER w AS running, CASE WHEN "role" = $7 AND "token_count" > '
        '$8 THEN CAST($8 AS integer) ELSE "token_count" END AS tok, MIN(CASE WHEN "role" = \'tool\' THEN '
        '"exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE "conversation_id" = $1 AND '
        '"seq" > GREATEST(COALESCE($9, (SELECT "through_seq" FROM "agentmemory_summary" WHERE "id" = '
        '(SELECT "summary_id" FROM conv)), 0), COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq")'
        ' FROM conv), 0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC '
        'LIMIT COALESCE((SELECT CAST(LEAST(CASE WHEN conv."message_count" <= 0 THEN 16 ELSE GREATEST(16, '
        'CASE WHEN conv."stored_tokens" <= conv."message_count" THEN $4 ELSE div($5 * '
        'CAST(conv."message_count" AS numeric) + 2 * CAST(conv."stored_tokens" AS numeric) - 1, 2 * '
        'CAST(conv."stored_tokens" AS numeric)) END + 8) END, $6) AS bigint) FROM conv), 0)) tail WHERE '
        'running - tok <= $3 OR "seq" >= reach UNION ALL SELECT 0, "message_count", CAST((SELECT "seq" '
        'FROM "agentmemory_message" WHERE "conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)),'
        ' "human_message_count", "stored_tokens", NULL, NULL, "id", CAST("pinned_last_seq" AS '
        'varchar(20)), "pinned_seq", NULL, NULL, "pending_tool_calls" FROM conv UNION ALL SELECT 1, '
        '"through_seq", CAST("first_seq" AS varchar(20)), "token_count", "human_messages_covered", '
        'CAST("tokens_covered" AS varchar(20)), NULL, "id", "token_counter", 1, "text", NULL, NULL FROM '
        '"agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) UNION ALL SELECT * FROM '
        '(SELECT -1, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS '
        'NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
    "head_pu": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 ELSE '
        '0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" END, '
        'CASE WHEN running <= $3 THEN CASE WHEN "role" = \'ai\' THEN ("metadata" -> \'thinking\') WHEN "role"'
        " = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END FROM (SELECT"
        ' "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", "name", '
        '"content", "parts", "metadata", SUM("token_count") OVER w AS running, "token_count" AS tok, '
        'MIN(CASE WHEN "role" = \'tool\' THEN "exchange_seq" END) OVER w AS reach FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT '
        '"through_seq" FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv)), 0), '
        'COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM conv), 0)) WINDOW w AS (ORDER BY'
        ' "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT COALESCE((SELECT CAST(LEAST(CASE'
        ' WHEN conv."message_count" <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN conv."stored_tokens" <= '
        'conv."message_count" THEN $4 ELSE div($5 * CAST(conv."message_count" AS numeric) + 2 * '
        'CAST(conv."stored_tokens" AS numeric) - 1, 2 * CAST(conv."stored_tokens" AS numeric)) END + 8) '
        'END, $6) AS bigint) FROM conv), 0)) tail WHERE running - tok <= $3 OR "seq" >= reach UNION ALL '
        'SELECT 2, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", 1, "content", "parts", "metadata" FROM "agentmemory_message" WHERE "conversation_id" = '
        '$1 AND "seq" BETWEEN (SELECT "pinned_seq" FROM conv) AND (SELECT COALESCE("pinned_last_seq", '
        '"pinned_seq") FROM conv) AND "role" = $2 UNION ALL SELECT 0, "message_count", CAST((SELECT "seq"'
        ' FROM "agentmemory_message" WHERE "conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS '
        'varchar(20)), "human_message_count", "stored_tokens", NULL, NULL, "id", CAST("pinned_last_seq" '
        'AS varchar(20)), "pinned_seq", NULL, NULL, "pending_tool_calls" FROM conv UNION ALL SELECT 1, '
        '"through_seq", CAST("first_seq" AS varchar(20)), "token_count", "human_messages_covered", '
        'CAST("tokens_covered" AS varchar(20)), NULL, "id", "token_counter", 1, "text", NULL, NULL FROM '
        '"agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM conv) UNION ALL SELECT * FROM '
        '(SELECT -1, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS '
        'NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
    "head_pc": (
        'WITH conv AS (SELECT "id", "message_count", "human_message_count", "stored_tokens", '
        '"pinned_seq", "pinned_last_seq", "pending_tool_calls", "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) SELECT 3, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", CASE WHEN running <= $3 THEN 1 ELSE '
        '0 END, CASE WHEN running <= $3 THEN "content" END, CASE WHEN running <= $3 THEN "parts" END, '
        'CASE WHEN running <= $3 THEN CASE WHEN "role" = \'ai\' THEN ("metadata" -> \'thinking\') WHEN "role"'
        " = 'tool' AND (\"metadata\" -> 'is_error') = 'true'::jsonb THEN 'true'::jsonb END END FROM (SELECT"
        ' "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", "name", '
        '"content", "parts", "metadata", SUM(CASE WHEN "role" = $7 AND "token_count" > $8 THEN CAST($8 AS'
        ' integer) ELSE "token_count" END) OVER w AS running, CASE WHEN "role" = $7 AND "token_count" > '
        '$8 THEN CAST($8 AS integer) ELSE "token_count" END AS tok, MIN(CASE WHEN "role" = \'tool\' THEN '
        '"exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE "conversation_id" = $1 AND '
        '"seq" > GREATEST(COALESCE($9, (SELECT "through_seq" FROM "agentmemory_summary" WHERE "id" = '
        '(SELECT "summary_id" FROM conv)), 0), COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq")'
        ' FROM conv), 0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC '
        'LIMIT COALESCE((SELECT CAST(LEAST(CASE WHEN conv."message_count" <= 0 THEN 16 ELSE GREATEST(16, '
        'CASE WHEN conv."stored_tokens" <= conv."message_count" THEN $4 ELSE div($5 * '
        'CAST(conv."message_count" AS numeric) + 2 * CAST(conv."stored_tokens" AS numeric) - 1, 2 * '
        'CAST(conv."stored_tokens" AS numeric)) END + 8) END, $6) AS bigint) FROM conv), 0)) tail WHERE '
        'running - tok <= $3 OR "seq" >= reach UNION ALL SELECT 2, "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", 1, "content", "parts", "metadata" '
        'FROM "agentmemory_message" WHERE "conversation_id" = $1 AND "seq" BETWEEN (SELECT "pinned_seq" '
        'FROM conv) AND (SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM conv) AND "role" = $2 '
        'UNION ALL SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count", '
        '"stored_tokens", NULL, NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", NULL, '
        'NULL, "pending_tool_calls" FROM conv UNION ALL SELECT 1, "through_seq", CAST("first_seq" AS '
        'varchar(20)), "token_count", "human_messages_covered", CAST("tokens_covered" AS varchar(20)), '
        'NULL, "id", "token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = '
        '(SELECT "summary_id" FROM conv) UNION ALL SELECT * FROM (SELECT -1, "seq", "role", '
        '"token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", "name", 0, CAST(NULL AS '
        'text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS NULL ORDER BY "seq" DESC LIMIT '
        "17) orphans"
    ),
}


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0036_window_head_page_size_in_numeric"),
    ]

    operations = [
        _0027.RunSQLOnPostgreSQL(
            sql=[_0030._replace(code, STATEMENTS) for code in STATEMENTS],
            reverse_sql=[_0030._replace(code, _0036.STATEMENTS) for code in _0036.STATEMENTS],
            elidable=False,
        ),
    ]
