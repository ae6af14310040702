"""Django admin for conversations (with their transcript and a "Context window" page),
messages, summaries and long-term facts.

History is append-only: messages and summaries are read-only here (they are written by
``PersistentChatHistory`` and the compactor). Message lists are paginated changelists filtered
by conversation, never inlines: a conversation can hold 100,000 messages.

One module per model admin; this package imports them so that admin autodiscovery registers
them, and re-exports the names a project uses.
"""

from agentmemory.admin.calls import ModelCallAdmin
from agentmemory.admin.conversation import ConversationAdmin, ConversationAdminForm
from agentmemory.admin.deletion import (
    SummarisedDeletionMixin,
    summarise_user_deletions,
    summarised_deleted_objects,
)
from agentmemory.admin.fact import FactAdmin
from agentmemory.admin.message import MessageAdmin
from agentmemory.admin.summary import SummaryAdmin
from agentmemory.admin.utils import BoundedCountPaginator, CheckedQueryAdmin, admin_link, pretty_json

__all__ = [
    "BoundedCountPaginator",
    "CheckedQueryAdmin",
    "ConversationAdmin",
    "ConversationAdminForm",
    "FactAdmin",
    "MessageAdmin",
    "ModelCallAdmin",
    "SummarisedDeletionMixin",
    "SummaryAdmin",
    "admin_link",
    "pretty_json",
    "summarise_user_deletions",
    "summarised_deleted_objects",
]

summarise_user_deletions()
