"""PostgreSQL: the one-message append's functions store nothing when a counter would pass
the largest value of its column.

A conversation whose ``last_seq`` is 2**63 - 1 (a row written by hand: raw SQL, a data
migration) made every append fail with "bigint out of range",
a 500 from the API; a message or token count at that bound did the same. Each statement's
``UPDATE`` now also requires room in the counters it bumps (``last_seq``, ``message_count``,
``human_message_count``, ``stored_tokens``), so it updates no row and inserts nothing, and
``PersistentChatHistory`` refuses the append with ``ConversationFull`` (a seq) or
``ConversationStateError`` (a count), as ``agentmemory.store.append`` does for statements sent
as text. ``calls`` likewise updates no row when ``pending_tool_calls`` is not a JSON object,
or holds for the call a result answers what is no seq (a row written by hand): the cast
failed with "invalid input syntax for type bigint"; the locked path reads the column with
``agentmemory.messages.pending_calls``.

The arguments and result columns are those of migration 0029, so the four functions are
replaced in place (``CREATE OR REPLACE``) under their fixed names.
``tests/test_append_function.py`` checks that the live statements read as the text here.
Going back restores migration 0029's statements. Nothing on other databases."""

from importlib import import_module

from django.db import migrations

_0027 = import_module("agentmemory.migrations.0027_window_read_functions_in_migration")
_0029 = import_module("agentmemory.migrations.0029_append_one_functions")

#: the statement of each function, by the variant in its name (``agentmemory_append_one_<variant>``)
STATEMENTS = {
    "system": """WITH bumped AS (
    UPDATE agentmemory_conversation
    SET last_seq = last_seq + 1,
        message_count = message_count + 1,
        human_message_count = human_message_count + 0,
        stored_tokens = stored_tokens + $2,
        has_system_prompt = has_system_prompt OR (message_count = 0 AND 1 > 0), pinned_seq = CASE WHEN message_count = 0 AND 1 > 0 THEN last_seq + 1 ELSE pinned_seq END, pinned_last_seq = CASE WHEN 1 > 0 AND (message_count = 0 OR (pinned_seq IS NOT NULL AND COALESCE(pinned_last_seq, pinned_seq) = last_seq)) THEN last_seq + 1 ELSE pinned_last_seq END,
        updated_at = $3::timestamptz
    WHERE id = $1
      AND last_seq < 9223372036854775807 AND message_count < 9223372036854775807
      AND human_message_count <= 9223372036854775807 - 0
      AND stored_tokens <= 9223372036854775807 - $2
    RETURNING id, last_seq, updated_at
)
INSERT INTO agentmemory_message (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT bumped.id, bumped.last_seq, 'system', $4, '[]'::jsonb, '', $5,
       $2, $6, NULL, $7::jsonb, $8::jsonb, bumped.updated_at
FROM bumped
RETURNING id, seq, exchange_seq""",
    "human": """WITH bumped AS (
    UPDATE agentmemory_conversation
    SET last_seq = last_seq + 1,
        message_count = message_count + 1,
        human_message_count = human_message_count + 1,
        stored_tokens = stored_tokens + $2,
        updated_at = $3::timestamptz
    WHERE id = $1
      AND last_seq < 9223372036854775807 AND message_count < 9223372036854775807
      AND human_message_count <= 9223372036854775807 - 1
      AND stored_tokens <= 9223372036854775807 - $2
    RETURNING id, last_seq, updated_at
)
INSERT INTO agentmemory_message (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT bumped.id, bumped.last_seq, 'human', $4, '[]'::jsonb, '', $5,
       $2, $6, NULL, $7::jsonb, $8::jsonb, bumped.updated_at
FROM bumped
RETURNING id, seq, exchange_seq""",
    "ai": """WITH bumped AS (
    UPDATE agentmemory_conversation
    SET last_seq = last_seq + 1,
        message_count = message_count + 1,
        human_message_count = human_message_count + 0,
        stored_tokens = stored_tokens + $2,
        updated_at = $3::timestamptz
    WHERE id = $1
      AND last_seq < 9223372036854775807 AND message_count < 9223372036854775807
      AND human_message_count <= 9223372036854775807 - 0
      AND stored_tokens <= 9223372036854775807 - $2
    RETURNING id, last_seq, updated_at
)
INSERT INTO agentmemory_message (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT bumped.id, bumped.last_seq, 'ai', $4, '[]'::jsonb, '', $5,
       $2, $6, NULL, $7::jsonb, $8::jsonb, bumped.updated_at
FROM bumped
RETURNING id, seq, exchange_seq""",
    "calls": """WITH locked AS (
    SELECT id, last_seq, pending_tool_calls AS pending
    FROM agentmemory_conversation WHERE id = $1 FOR UPDATE
), new_ids AS (
    SELECT k FROM jsonb_array_elements_text($12::jsonb) AS t(k)
), bumped AS (
    UPDATE agentmemory_conversation AS c
    SET last_seq = locked.last_seq + 1,
        message_count = c.message_count + 1,
        stored_tokens = c.stored_tokens + $2,
        pending_tool_calls = (locked.pending - $13::text) || COALESCE(
            (SELECT jsonb_object_agg(k, locked.last_seq + 1) FROM new_ids), '{}'::jsonb
        ),
        updated_at = $3::timestamptz
    FROM locked
    WHERE c.id = locked.id
      AND locked.last_seq < 9223372036854775807 AND c.message_count < 9223372036854775807
      AND c.stored_tokens <= 9223372036854775807 - $2
      AND jsonb_typeof(locked.pending) = 'object'
      AND (NOT locked.pending ? $13::text
           OR (jsonb_typeof(locked.pending -> $13::text) = 'number'
               AND (locked.pending ->> $13::text) ~ '^[1-9][0-9]{0,17}$'))
      AND ($13::text = '' OR NOT $14 OR locked.pending ? $13::text)
      AND NOT EXISTS (SELECT 1 FROM new_ids WHERE locked.pending ? new_ids.k)
    RETURNING c.id, locked.last_seq AS base, locked.pending AS pending, c.updated_at
)
INSERT INTO agentmemory_message (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT bumped.id, bumped.base + 1, $4, $5, $6::jsonb, $7, $8,
       $2, $9,
       CASE WHEN $13::text = '' THEN bumped.base + 1
            ELSE (bumped.pending ->> $13::text)::bigint END,
       $10::jsonb, $11::jsonb, bumped.updated_at
FROM bumped
RETURNING id, seq, exchange_seq""",
}


def _replace(variant, statements):  # type: ignore[no-untyped-def]
    return (
        f"CREATE OR REPLACE FUNCTION {_0029._signature(variant)} RETURNS TABLE ({_0029.RESULT}) "
        f"LANGUAGE plpgsql AS $agentmemory$ BEGIN RETURN QUERY {statements[variant]}; END $agentmemory$"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0040_fact_superseded_at"),
    ]

    operations = [
        _0027.RunSQLOnPostgreSQL(
            sql=[_replace(variant, STATEMENTS) for variant in STATEMENTS],
            reverse_sql=[_replace(variant, _0029.STATEMENTS) for variant in _0029.STATEMENTS],
            elidable=False,
        ),
    ]
