import pytest
from agentmemory.models import Conversation, Summary
from agentmemory.llm.fake import ScriptedChatModel
from tests.test_foreign_summary import _conversation, _compactor, pair, FOREIGN, OWN  # noqa
from agentmemory.context import ContextWindowBuilder
pytestmark = pytest.mark.django_db

def test_moved_mid_compaction(user, django_user_model):
    bob = django_user_model.objects.create_user("bob2")
    conv = _conversation(user, 6)
    other = _conversation(bob, 2)
    llm = ScriptedChatModel(["Orders 0 to 1.", "x", "y"])
    c = _compactor(conv, llm)
    run = c.run()
    print("first", run.status, run.summary and run.summary.pk)
    s1 = Conversation.objects.get(pk=conv.pk).summary
    from agentmemory.history import PersistentChatHistory
    from tests.factories import turn
    PersistentChatHistory(conv).add_messages(turn(7)); PersistentChatHistory(conv).add_messages(turn(8))
    def meanwhile(messages):
        Summary.objects.filter(pk=s1.pk).update(conversation=other)
        return "Orders 0 to 8."
    llm2 = ScriptedChatModel([meanwhile, "z"])
    run2 = _compactor(conv, llm2).run()
    new = Conversation.objects.get(pk=conv.pk).summary
    print("second", run2.status, new and (new.pk, new.conversation_id, new.previous_id, new.previous.conversation_id if new.previous else None))
    assert not (new and new.previous and new.previous.conversation_id != conv.pk)

def test_deleted_while_building(user, monkeypatch):
    conv = _conversation(user, 6)
    llm = ScriptedChatModel(["Orders 0 to 4."])
    _compactor(conv, llm).run()
    s = Conversation.objects.get(pk=conv.pk).summary
    import agentmemory.context.builder as b
    from agentmemory.store import window as w
    orig = w.read_head
    def patched(*a, **k):
        r = orig(*a, **k)
        Summary.objects.filter(pk=s.pk).delete()
        return r
    monkeypatch.setattr(b, "read_head", patched, raising=False)
    win = ContextWindowBuilder(conv, memory_compactor=_compactor(conv, ScriptedChatModel(["q"]*3))).build(max_tokens=400)
    print([m.content[:40] for m in win.messages], win.summary_id, win.uncovered)
