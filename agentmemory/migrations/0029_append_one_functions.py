"""PostgreSQL: the one-message append's statements as server-side functions under fixed names
(``agentmemory.store.append._run_one`` calls them), created here from the statement text
frozen in this module.

An append sent as text (Django's default) was parsed and planned on every call, which cost
about as much as running it: a PL/pgSQL function keeps its statement's plan in the server
session, as the window's read functions do (migration 0027, ``agentmemory.store.functions``).
Each statement is the one ``agentmemory.store.append`` sends as text otherwise: without tool
calls, one per role (``system`` with the pin of a conversation holding only system messages,
``human``, ``ai``: the role's literals are in the text), and ``calls`` (an AI message with tool
calls, or a tool result, which checks and changes the pending calls under the row lock), with
its parameters written ``$1``, ``$2`` ... in the order of the function's arguments. It returns
the stored row's ``id``, ``seq`` and ``exchange_seq``. ``tests/test_append_function.py`` checks
that the live statements still read as the text here: a release that changes one ships a
migration of its own that replaces the functions.

The functions are VOLATILE (they write) and run with the caller's rights. Each is dropped
first if it exists (``migrate --fake`` back past this migration leaves them in place), as
migration 0028 does for the window's. Going back drops them. Nothing on other databases."""

from importlib import import_module

from django.db import migrations

_0027 = import_module("agentmemory.migrations.0027_window_read_functions_in_migration")

#: the arguments of the functions without tool calls: id, tokens, now, content, name,
#: counter, metadata, parts
PLAIN_ARGUMENTS = "bigint, bigint, text, text, text, text, text, text"
#: the arguments of ``calls``: id, tokens, now, role, content, tool_calls, tool_call_id, name,
#: counter, metadata, parts, new_ids, answered, strict
CALLS_ARGUMENTS = "bigint, bigint, text, text, text, text, text, text, text, text, text, text, text, boolean"
#: the columns the statements return: the message's id, seq and exchange_seq
RESULT = "c0 bigint, c1 bigint, c2 bigint"

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


def _signature(variant):  # type: ignore[no-untyped-def]
    arguments = CALLS_ARGUMENTS if variant == "calls" else PLAIN_ARGUMENTS
    return f"agentmemory_append_one_{variant}({arguments})"


def _drop(variant):  # type: ignore[no-untyped-def]
    return f"DROP FUNCTION IF EXISTS {_signature(variant)}"


def _create(variant):  # type: ignore[no-untyped-def]
    return (
        f"CREATE FUNCTION {_signature(variant)} RETURNS TABLE ({RESULT}) LANGUAGE plpgsql "
        f"AS $agentmemory$ BEGIN RETURN QUERY {STATEMENTS[variant]}; END $agentmemory$"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0028_window_head_floor_and_gap"),
    ]

    operations = [
        _0027.RunSQLOnPostgreSQL(
            sql=[*(_drop(variant) for variant in STATEMENTS), *(_create(variant) for variant in STATEMENTS)],
            reverse_sql=[_drop(variant) for variant in STATEMENTS],
            elidable=False,
        ),
    ]
