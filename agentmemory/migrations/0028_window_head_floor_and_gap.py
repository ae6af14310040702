"""PostgreSQL: the window's head functions read no row a summary covers, and bring what the
default gap report needs (``agentmemory.store.window._head_sql``).

The head statement's page now starts above a floor: the summary's ``through_seq`` (a ninth
argument, ``floor``; NULL for the stored summary's) and the pinned prompt's last seq, so the
rows read no longer grow with the budget. Its conversation and summary rows also carry the
conversation's oldest seq and the summary's ``first_seq`` and ``tokens_covered``, and a new
branch its newest orphaned tool results: with them the builder works out what a window leaves
uncovered without the gap probe's statement in the common case
(``agentmemory.context.gaps.probe_from_head``). The result columns are those of migration
0027; the argument list changes, so the four head functions are dropped and created again
under their fixed names (a process of the previous release that still calls one with eight
arguments sends its statement as text from then on). The gap probe's function is unchanged.
Going back restores migration 0027's functions. Nothing on other databases."""

from importlib import import_module

from django.db import migrations

_0027 = import_module("agentmemory.migrations.0027_window_read_functions_in_migration")

#: the arguments of the head statement's functions: id, system, room, half, triple,
#: max_page, tool, cap, floor
HEAD_ARGUMENTS = "bigint, text, bigint, bigint, bigint, bigint, text, bigint, bigint"

#: the statement of each head function, by the code in its name (``agentmemory_window_<code>``)
STATEMENTS = {
    "head_nu": (
        'SELECT 3, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", CASE WHEN running <= $3 THEN 1 ELSE 0 END, CASE WHEN running <= $3 THEN "content" '
        'END, CASE WHEN running <= $3 THEN "parts" END, CASE WHEN running <= $3 AND "role" = \'ai\' '
        'THEN ("metadata" -> \'thinking\') END FROM (SELECT "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", "content", "parts", "metadata", '
        'SUM("token_count") OVER w AS running, "token_count" AS tok, MIN(CASE WHEN "role" = \'tool\' '
        'THEN "exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE "conversation_id" '
        '= $1 AND "seq" > GREATEST(COALESCE($9, (SELECT "through_seq" FROM "agentmemory_summary" '
        'WHERE "id" = (SELECT "summary_id" FROM "agentmemory_conversation" WHERE "id" = $1)), 0), '
        'COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM "agentmemory_conversation" '
        'WHERE "id" = $1), 0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY '
        '"seq" DESC LIMIT COALESCE((SELECT LEAST(CASE WHEN "agentmemory_conversation"."message_count"'
        ' <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN "agentmemory_conversation"."stored_tokens" <= '
        '"agentmemory_conversation"."message_count" THEN $4 ELSE ($5 * '
        '"agentmemory_conversation"."message_count" + 2 * "agentmemory_conversation"."stored_tokens" '
        '- 1) / (2 * "agentmemory_conversation"."stored_tokens") END + 8) END, $6) FROM '
        '"agentmemory_conversation" WHERE "id" = $1), 0)) tail WHERE running - tok <= $3 OR "seq" >= '
        'reach UNION ALL SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" '
        'WHERE "conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count",'
        ' "stored_tokens", NULL, NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", '
        'NULL, NULL, "pending_tool_calls" FROM "agentmemory_conversation" WHERE "id" = $1 UNION ALL '
        'SELECT 1, "through_seq", CAST("first_seq" AS varchar(20)), "token_count", '
        '"human_messages_covered", CAST("tokens_covered" AS varchar(20)), NULL, "id", '
        '"token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = (SELECT '
        '"summary_id" FROM "agentmemory_conversation" WHERE "id" = $1) UNION ALL SELECT * FROM '
        '(SELECT -1, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", '
        '"id", "name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS'
        ' NULL ORDER BY "seq" DESC LIMIT 17) orphans'
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
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT'
        ' "through_seq" FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1)), 0), COALESCE((SELECT '
        'COALESCE("pinned_last_seq", "pinned_seq") FROM "agentmemory_conversation" WHERE "id" = $1), '
        '0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT '
        'COALESCE((SELECT LEAST(CASE WHEN "agentmemory_conversation"."message_count" <= 0 THEN 16 '
        'ELSE GREATEST(16, CASE WHEN "agentmemory_conversation"."stored_tokens" <= '
        '"agentmemory_conversation"."message_count" THEN $4 ELSE ($5 * '
        '"agentmemory_conversation"."message_count" + 2 * "agentmemory_conversation"."stored_tokens" '
        '- 1) / (2 * "agentmemory_conversation"."stored_tokens") END + 8) END, $6) FROM '
        '"agentmemory_conversation" WHERE "id" = $1), 0)) tail WHERE running - tok <= $3 OR "seq" >= '
        'reach UNION ALL SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" '
        'WHERE "conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count",'
        ' "stored_tokens", NULL, NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", '
        'NULL, NULL, "pending_tool_calls" FROM "agentmemory_conversation" WHERE "id" = $1 UNION ALL '
        'SELECT 1, "through_seq", CAST("first_seq" AS varchar(20)), "token_count", '
        '"human_messages_covered", CAST("tokens_covered" AS varchar(20)), NULL, "id", '
        '"token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = (SELECT '
        '"summary_id" FROM "agentmemory_conversation" WHERE "id" = $1) UNION ALL SELECT * FROM '
        '(SELECT -1, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", '
        '"id", "name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS'
        ' NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
    "head_pu": (
        'SELECT 3, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", "id", '
        '"name", CASE WHEN running <= $3 THEN 1 ELSE 0 END, CASE WHEN running <= $3 THEN "content" '
        'END, CASE WHEN running <= $3 THEN "parts" END, CASE WHEN running <= $3 AND "role" = \'ai\' '
        'THEN ("metadata" -> \'thinking\') END FROM (SELECT "seq", "role", "token_count", '
        '"exchange_seq", "tool_call_id", "tool_calls", "id", "name", "content", "parts", "metadata", '
        'SUM("token_count") OVER w AS running, "token_count" AS tok, MIN(CASE WHEN "role" = \'tool\' '
        'THEN "exchange_seq" END) OVER w AS reach FROM "agentmemory_message" WHERE "conversation_id" '
        '= $1 AND "seq" > GREATEST(COALESCE($9, (SELECT "through_seq" FROM "agentmemory_summary" '
        'WHERE "id" = (SELECT "summary_id" FROM "agentmemory_conversation" WHERE "id" = $1)), 0), '
        'COALESCE((SELECT COALESCE("pinned_last_seq", "pinned_seq") FROM "agentmemory_conversation" '
        'WHERE "id" = $1), 0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY '
        '"seq" DESC LIMIT COALESCE((SELECT LEAST(CASE WHEN "agentmemory_conversation"."message_count"'
        ' <= 0 THEN 16 ELSE GREATEST(16, CASE WHEN "agentmemory_conversation"."stored_tokens" <= '
        '"agentmemory_conversation"."message_count" THEN $4 ELSE ($5 * '
        '"agentmemory_conversation"."message_count" + 2 * "agentmemory_conversation"."stored_tokens" '
        '- 1) / (2 * "agentmemory_conversation"."stored_tokens") END + 8) END, $6) FROM '
        '"agentmemory_conversation" WHERE "id" = $1), 0)) tail WHERE running - tok <= $3 OR "seq" >= '
        'reach UNION ALL SELECT 2, "seq", "role", "token_count", "exchange_seq", "tool_call_id", '
        '"tool_calls", "id", "name", 1, "content", "parts", "metadata" FROM "agentmemory_message" '
        'WHERE "conversation_id" = $1 AND "seq" BETWEEN (SELECT "pinned_seq" FROM '
        '"agentmemory_conversation" WHERE "id" = $1) AND (SELECT COALESCE("pinned_last_seq", '
        '"pinned_seq") FROM "agentmemory_conversation" WHERE "id" = $1) AND "role" = $2 UNION ALL '
        'SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count", '
        '"stored_tokens", NULL, NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", '
        'NULL, NULL, "pending_tool_calls" FROM "agentmemory_conversation" WHERE "id" = $1 UNION ALL '
        'SELECT 1, "through_seq", CAST("first_seq" AS varchar(20)), "token_count", '
        '"human_messages_covered", CAST("tokens_covered" AS varchar(20)), NULL, "id", '
        '"token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = (SELECT '
        '"summary_id" FROM "agentmemory_conversation" WHERE "id" = $1) UNION ALL SELECT * FROM '
        '(SELECT -1, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", '
        '"id", "name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS'
        ' NULL ORDER BY "seq" DESC LIMIT 17) orphans'
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
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "seq" > GREATEST(COALESCE($9, (SELECT'
        ' "through_seq" FROM "agentmemory_summary" WHERE "id" = (SELECT "summary_id" FROM '
        '"agentmemory_conversation" WHERE "id" = $1)), 0), COALESCE((SELECT '
        'COALESCE("pinned_last_seq", "pinned_seq") FROM "agentmemory_conversation" WHERE "id" = $1), '
        '0)) WINDOW w AS (ORDER BY "seq" DESC ROWS UNBOUNDED PRECEDING) ORDER BY "seq" DESC LIMIT '
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
        'SELECT 0, "message_count", CAST((SELECT "seq" FROM "agentmemory_message" WHERE '
        '"conversation_id" = $1 ORDER BY "seq" LIMIT 1) AS varchar(20)), "human_message_count", '
        '"stored_tokens", NULL, NULL, "id", CAST("pinned_last_seq" AS varchar(20)), "pinned_seq", '
        'NULL, NULL, "pending_tool_calls" FROM "agentmemory_conversation" WHERE "id" = $1 UNION ALL '
        'SELECT 1, "through_seq", CAST("first_seq" AS varchar(20)), "token_count", '
        '"human_messages_covered", CAST("tokens_covered" AS varchar(20)), NULL, "id", '
        '"token_counter", 1, "text", NULL, NULL FROM "agentmemory_summary" WHERE "id" = (SELECT '
        '"summary_id" FROM "agentmemory_conversation" WHERE "id" = $1) UNION ALL SELECT * FROM '
        '(SELECT -1, "seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls", '
        '"id", "name", 0, CAST(NULL AS text), CAST(NULL AS jsonb), CAST(NULL AS jsonb) FROM '
        '"agentmemory_message" WHERE "conversation_id" = $1 AND "role" = \'tool\' AND "exchange_seq" IS'
        ' NULL ORDER BY "seq" DESC LIMIT 17) orphans'
    ),
}


def _create(code):  # type: ignore[no-untyped-def]
    # STABLE: the function only reads, within the snapshot of the statement calling it.
    return (
        f"CREATE FUNCTION agentmemory_window_{code}({HEAD_ARGUMENTS}) RETURNS TABLE ({_0027.HEAD_RESULT}) "
        f"LANGUAGE plpgsql STABLE AS $agentmemory$ BEGIN RETURN QUERY {STATEMENTS[code]}; END $agentmemory$"
    )


def _drop(code, arguments):  # type: ignore[no-untyped-def]
    return f"DROP FUNCTION IF EXISTS agentmemory_window_{code}({arguments})"


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0027_window_read_functions_in_migration"),
    ]

    operations = [
        _0027.RunSQLOnPostgreSQL(
            sql=[
                *(_drop(code, _0027.HEAD_ARGUMENTS) for code in STATEMENTS),
                *(_create(code) for code in STATEMENTS),
            ],
            reverse_sql=[
                *(_drop(code, HEAD_ARGUMENTS) for code in STATEMENTS),
                *(_0027._create(code) for code in STATEMENTS),
            ],
            elidable=False,
        ),
    ]
