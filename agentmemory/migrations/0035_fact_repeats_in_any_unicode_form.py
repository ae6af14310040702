"""Facts are compared for exact repeats in one Unicode form
(``agentmemory.knowledge.text.normalize``: NFKC, invisible characters left out) and stored
composed (NFC). The stored facts holding a character that is not ASCII (the only ones whose
form changes) get their content composed and their ``content_hash`` computed again; live
facts of one scope that are now the same fact (stored once composed and once decomposed, or
with a zero-width space) become history of the newest of them, as a repeat stored today
would have been reported instead: the newest of those not expired, so that a newer copy that
has expired never takes the fact in force out of recall, and persistent when one of them is
(a repeat only ever made a fact persistent), so that a newer recent-entry copy never makes
it age out. The rule is written in this module as it runs it. Going back computes the hashes
as before (content stays composed: the same text)."""

import hashlib
import re
import unicodedata

from django.db import migrations, models
from django.utils import timezone

#: ``recall.text.INVISIBLE_RANGES`` less the zero-width non-joiner and joiner
_UNSEEN = re.compile("[\u00ad\u180e\u200b\u200e\u200f\u2060-\u2064\ufe00-\ufe0f\ufeff\U000e0100-\U000e01ef]")
_NON_ASCII = r"[^\x01-\x7f]"


def _hash_0035(content):  # type: ignore[no-untyped-def]
    text = " ".join(_UNSEEN.sub("", unicodedata.normalize("NFKC", content)).split())
    return hashlib.sha256(text.encode()).hexdigest()


def _hash_0002(content):  # type: ignore[no-untyped-def]
    return hashlib.sha256(" ".join(content.split()).encode()).hexdigest()


def _rehash(apps, schema_editor, digest, compose):  # type: ignore[no-untyped-def]
    Fact = apps.get_model("agentmemory", "Fact")
    facts = Fact.objects.using(schema_editor.connection.alias)
    changed = {}  # pk: (content, hash, scope, live, (created_at, expires_at, persistent))
    now = timezone.now()
    rows = facts.filter(content__regex=_NON_ASCII).values_list(
        "pk",
        "owner_id",
        "agent_key",
        "namespace",
        "kind",
        "content",
        "content_hash",
        "superseded_by_id",
        "created_at",
        "expires_at",
        "persistent",
    )
    for pk, owner, agent_key, namespace, kind, content, old, successor, *state in rows.iterator(
        chunk_size=2000
    ):
        text = unicodedata.normalize("NFC", content) if compose else content
        new = digest(text)
        if new != old or text != content:
            changed[pk] = (text, new, (owner, agent_key, namespace, kind), successor is None, tuple(state))
    # live facts that are one fact now: the newest not expired stays in force, the others
    # (and their history) become its history, before any hash changes (the live-content
    # uniqueness)
    groups = {}
    for pk, (_text, new, scope, live, state) in changed.items():
        if live:
            groups.setdefault((*scope, new), {})[pk] = state
    for (owner, agent_key, namespace, kind, new), members in groups.items():
        others = facts.filter(
            owner_id=owner,
            agent_key=agent_key,
            namespace=namespace,
            kind=kind,
            content_hash=new,
            superseded_by__isnull=True,
        ).values_list("pk", "created_at", "expires_at", "persistent")
        for pk, *state in others:
            if pk not in changed:  # a fact whose hash stays: one of the group
                members[pk] = tuple(state)
        if len(members) < 2:
            continue
        # (created_at, expires_at, persistent) of each; in force: not expired
        in_force = {pk: state[1] is None or state[1] > now for pk, state in members.items()}
        head = max(members, key=lambda pk: (in_force[pk], members[pk][0], pk))
        losers = [pk for pk in members if pk != head]
        if not members[head][2] and any(members[pk][2] and in_force[pk] for pk in losers):
            facts.filter(pk=head).update(persistent=True)
        facts.filter(superseded_by_id__in=losers).update(superseded_by_id=head)
        facts.filter(pk__in=losers).update(superseded_by_id=head)
    # two passes: a live fact taking the hash another one leaves must not meet it
    for pk in changed:
        facts.filter(pk=pk).update(content_hash=f"0035-{pk}")
    for pk, (text, new, _scope, _live, _state) in changed.items():
        facts.filter(pk=pk).update(content=text, content_hash=new)


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    _rehash(apps, schema_editor, _hash_0035, compose=True)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    _rehash(apps, schema_editor, _hash_0002, compose=False)


class Migration(migrations.Migration):
    dependencies = [("agentmemory", "0034_fulltext_words_as_written")]

    operations = [
        migrations.AlterField(
            model_name="fact",
            name="content_hash",
            field=models.CharField(
                editable=False,
                help_text="SHA-256 of the content in one normal form (NFKC, spaces collapsed): repeats.",
                max_length=64,
                verbose_name="content hash",
            ),
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
