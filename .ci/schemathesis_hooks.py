"""Hooks of .ci/schemathesis: where the schema cannot state a rule, say so narrowly here.

OpenAPI describes a request body on its own, and a few rules the API enforces are outside what
it can say; only these are set aside (each failure set aside is listed in set-aside.txt of the
report directory):

1. The body of POST .../messages/ is read in the shape ``message_format`` (or
   ``?format=openai``) names, and OpenAPI cannot tie a body to a query parameter. The schema
   describes the native shape, the default; generated requests in another format are not sent
   (tests/test_api.py and tests/test_api_access.py cover the OpenAI, Anthropic and LangChain
   shapes).
2. A body the schema calls valid can still be refused for what is stored or for how its
   items fit together: a tool result that answers no pending call, a tool call id already
   pending or repeated, a message whose ``content`` is not its ``parts``' text (equality
   of two fields is beyond JSON Schema), a usage range whose ``until`` is earlier than its
   ``since`` (two query parameters compared), a fact that is no longer in force (a PATCH
   that changes the seeded fact's content supersedes it, so later ones find it history), an
   import document whose
   counters, seqs or tool exchanges disagree (``IMPORT_RULES``) or whose message holds a
   content part that breaks a part's rule (a source per kind, its media type), a tool call
   id twice, or more parts or tool calls than the ``AGENTMEMORY`` limits (the row schema
   states each role's rules, not what a stored part holds); and a context window whose stored messages do
   not fit the budget asked (the documented 422), and a PATCH of a fact no longer in force (the
   documented 409). The answer names the rule; a
   positive_data_acceptance failure whose answer names one of these rules is dropped, every
   other failure stays.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import schemathesis

MESSAGES = "/api/conversations/{conversation_uuid}/messages/"

#: what the 400 of a schema-valid body says when stored state or the body's items refused it
STATE_RULES = (
    "answers no earlier unanswered tool call",  # a tool result with no pending call
    "are already awaiting results",  # a tool call id reused while pending
    "appears twice",  # one message repeats a tool call id
    "is not in force",  # PATCH of a fact that a change superseded
    "is not a live fact of this scope",  # supersedes names no fact in force
    "give content or parts, not both",  # content that differs from its parts' text
    "Must not be earlier than since.",  # /api/usage/ with until < since
)
#: what the 400 of a schema-valid import document says when its rows disagree with each
#: other (agentmemory.transfer checks them together; the schema describes each row alone)
IMPORT_RULES = (
    "seqs must start at 1 or more and strictly increase",
    "an AI message's exchange is its own seq",
    "names no earlier AI message with tool calls",
    "makes no call",
    "belongs to no tool exchange",
    "but the messages give",  # a counter that disagrees with the messages
    "is below the last message's seq",
    "names no tool call of an AI message",
    "is answered by a tool result in the document",
    "needs 0 <= first_seq <= through_seq",
    "two summaries end at the same seq",
    "human messages",  # human_messages_covered disagrees with the messages it covers
    "must name a summary that ends earlier",
    "names no summary in the document",
    "is set but no message is pinned",  # pinned_last_seq without a pinned system message
    "but the messages pin seqs",  # pinned_last_seq that is not where the leading run ends
)


@schemathesis.hook("filter_case")
def native_messages_only(context: Any, case: Any) -> bool:
    if case.operation.method.upper() != "POST" or case.operation.path != MESSAGES:
        return True
    query = case.query or {}
    shape = query.get("message_format")
    if shape is None:
        return query.get("format") != "openai"
    return bool(shape == "native")


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    reason = _set_aside(failure, response)
    if reason is None:
        return True
    # Every failure set aside is listed, so a reader of the report sees what was not counted.
    report = os.environ.get("SCHEMATHESIS_REPORT_DIR")
    if report:
        with open(os.path.join(report, "set-aside.txt"), "a", encoding="utf-8") as out:
            where = f"{case.operation.method.upper()} {case.operation.path} {response.status_code}"
            out.write(f"{where}: {reason}\n")
    return False


def _set_aside(failure: Any, response: Any) -> str | None:
    """Why a failure is set aside (a rule named in the module docstring), or ``None``."""
    if type(failure).__name__ != "RejectedPositiveData":
        return None
    if response.status_code == 422 and b"context_budget_exceeded" in response.content:
        return "the stored messages do not fit the budget asked"
    if response.status_code == 409 and b'"not_in_force"' in response.content:
        return "the fact is no longer in force (the documented 409)"
    if response.status_code != 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if body.get("error") == "invalid_document":
        detail = str(body.get("detail", ""))
        if any(rule in detail for rule in IMPORT_RULES) or _message_rule(body):
            return f"import document: {detail[:200]}"
        return None
    text = f"{body.get('detail', '')} {json.dumps(body.get('fields', {}))}"
    return next((rule for rule in STATE_RULES if rule in text), None)


def _message_rule(body: dict) -> bool:
    """Whether an import 400 names a rule of one stored message that its row schema does not
    state: what a content part holds (``validate_parts``: "part 0 (image) needs exactly one
    source"), more parts or tool calls than the ``AGENTMEMORY`` limits allow, or a tool call
    id given twice (JSON Schema cannot ask a key to differ across items). (The rules of each
    role, which columns it carries, are in the row schema.)"""
    # The column checks name the column (``messages[3].role``); the message validator's
    # refusal names the message itself (``messages[3]``).
    if re.fullmatch(r"messages\[\d+\]", str(body.get("path", "") or "")) is None:
        return False
    reason = str(body.get("detail", "")).split(": ", 1)[-1]
    return reason.startswith("part ") or "over the maximum" in reason or "appears twice" in reason
