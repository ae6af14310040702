"""The admin's recall page reads a user's name by the rule every command reads it by
(``agentmemory.management.owners.find_user_by_name``): as given, else as ``create_user``
stores it (NFKC).

The commands found "alice" typed in full-width letters
(``tests/test_fault_variants_commands.py``), while the admin's recall page compared the name
as typed and said "No user".
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agentmemory.knowledge import KnowledgeMemory

pytestmark = pytest.mark.django_db

#: "alice" in full-width letters, which NFKC reads as "alice"
WIDE = "\uff41\uff4c\uff49\uff43\uff45"


def test_the_admin_recall_page_finds_the_owner_in_any_form_of_the_name(admin_client) -> None:  # type: ignore[no-untyped-def]
    alice = get_user_model().objects.create_user("alice")
    KnowledgeMemory(alice).store("Takes the night ferry", "travel", persistent=True)
    page = admin_client.get(reverse("admin:agentmemory_fact_recall"), {"owner": WIDE, "q": "ferry"})
    assert page.status_code == 200
    assert "Takes the night ferry" in page.content.decode()
    assert (
        admin_client.get(
            reverse("admin:agentmemory_fact_recall"), {"owner": str(alice.pk), "q": "ferry"}
        ).status_code
        == 200
    )
