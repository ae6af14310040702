"""A "key: value" fact's key is never only a time, a day or a period, in any of the ways
people write them: "8h15" and "14h30" (French), "20 Uhr" (German), "8 a.m." and "8
o'clock", the days, months and relative days of French, German, Spanish, Italian,
Portuguese and Dutch ("Lundi: dentiste", "Montag: Zahnarzt"), of Chinese, Japanese and
Korean ("\u5468\u4e00\uff1a\u7259\u533b"), and periods such as "Q1" or "Weekdays". Each was
read as a key, so the second entry of a day replaced the first, which was still true (the
kind of issue 20's "Pickup at 8:15 for Lea"). Labels that head a note in other languages
("Notiz:", "Rappel:") and generic ones ("Q:", "Link:") are no key either. A key that names
a thing still supersedes."""

from __future__ import annotations

import pytest

from agentmemory.knowledge import KnowledgeMemory, fact_key
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

#: two entries under the same heading that only says when (or is a label): both still true
SAME_WHEN = [
    ("8h15: drop Lea at school", "8h15: Tom's swimming lesson"),
    ("14h30: r\u00e9union budget", "14h30: appeler le garage"),
    ("Samedi 10h: foot", "Samedi 10h: march\u00e9"),
    ("20 Uhr: Training", "20 Uhr: Elternabend"),
    ("20.00 Uhr: Chor", "20.00 Uhr: Kino"),
    ("8 a.m.: pick up Lea", "8 a.m.: call the bank"),
    ("8 o'clock: pick up Lea", "8 o'clock: call the bank"),
    ("Lundi: dentiste", "Lundi: coiffeur"),
    ("Le mardi: judo", "Le mardi: piano"),
    ("Demain: appeler maman", "Demain: payer le loyer"),
    ("5 janvier: dentiste", "5 janvier: anniversaire de Tom"),
    ("Montag: Zahnarzt", "Montag: Friseur"),
    ("Mittwochs: Chor", "Mittwochs: Schwimmen"),
    ("Am Montag um 9 Uhr: Zahnarzt", "Am Montag um 9 Uhr: Elterngespr\u00e4ch"),
    ("Morgen fr\u00fch: Bäcker", "Morgen fr\u00fch: Post"),
    ("Lunes: dentista", "Lunes: peluquer\u00eda"),
    ("Ma\u00f1ana por la tarde: gimnasio", "Ma\u00f1ana por la tarde: supermercado"),
    ("Domenica: pranzo dalla nonna", "Domenica: partita di calcio"),
    ("Segunda-feira: dentista", "Segunda-feira: academia"),
    ("Maandag: tandarts", "Maandag: kapper"),
    ("\u5468\u4e00\uff1a\u7259\u533b", "\u5468\u4e00\uff1a\u7406\u53d1"),  # Monday: dentist / haircut
    ("\u4e0b\u53483\u70b9\uff1a\u5f00\u4f1a", "\u4e0b\u53483\u70b9\uff1a\u63a5\u5b69\u5b50"),  # 3 pm
    ("\u6708\u66dc\u65e5\uff1a\u6b6f\u533b\u8005", "\u6708\u66dc\u65e5\uff1a\u7f8e\u5bb9\u9662"),  # Monday
    ("\uc6d4\uc694\uc77c: \uce58\uacfc", "\uc6d4\uc694\uc77c: \ubbf8\uc6a9\uc2e4"),  # Korean Monday
    ("Q1: hire two engineers", "Q1: launch the mobile app"),
    ("Weekdays: gym at 7", "Weekdays: walk the dog"),
    ("Every other week: cleaning", "Every other week: book club"),
    # labels heading a note, in other languages and generic ones
    ("Notiz: Milch kaufen", "Notiz: Oma anrufen"),
    ("Rappel: appeler maman", "Rappel: payer le loyer"),
    ("Recordatorio: llamar al banco", "Recordatorio: pagar la luz"),
    ("Q: What is the Wi-Fi? A: hunter2", "Q: Who is the landlord? A: Mr. Brown"),
    ("Link: https://example.com/handbook", "Link: https://example.com/holidays"),
    ("ASAP: fix the leaking tap", "ASAP: renew the passport"),
]


@pytest.mark.parametrize(("first", "second"), SAME_WHEN)
def test_entries_headed_by_the_same_time_day_or_label_both_stay(first: str, second: str) -> None:
    assert fact_key(first) is None, first
    km = KnowledgeMemory(UserFactory())
    km.remember(first, "plans", persistent=True)
    assert km.store(second, "plans", persistent=True).action == "created", (first, second)
    assert sorted(f.content for f in km.live_facts()) == sorted([first, second])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Adresse: Hauptstra\u00dfe 1", "Adresse: Bahnhofstra\u00dfe 5"),
        ("Lieblingsfarbe: blau", "Lieblingsfarbe: gr\u00fcn"),
        ("Couleur pr\u00e9f\u00e9r\u00e9e: bleu", "Couleur pr\u00e9f\u00e9r\u00e9e: vert"),
        ("Start date: May 1", "Start date: June 3"),
        ("Monday standup room: Atlas", "Monday standup room: Orion"),  # a thing of a day
        ("\u9996\u9009\u8bed\u8a00\uff1aPython", "\u9996\u9009\u8bed\u8a00\uff1aRust"),
    ],
)
def test_a_key_naming_a_thing_still_supersedes(old: str, new: str) -> None:
    km = KnowledgeMemory(UserFactory())
    first = km.store(old, "personal", persistent=True).fact
    assert km.store(new, "personal", persistent=True).superseded_ids == (first.pk,), (old, new)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Allergy: peanuts", "Allergy: shellfish"),
        ("Food allergy: peanuts", "Food allergy: kiwi"),
        ("Medication: ibuprofen 400 mg", "Medication: lisinopril 10 mg"),
        ("Pet: a cat named Tom", "Pet: a dog named Rex"),
        ("Hobby: chess", "Hobby: painting"),
        ("Kid: Lea, 7", "Kid: Tom, 4"),
    ],
)
def test_entries_headed_by_one_of_several_things_a_person_has_both_stay(first: str, second: str) -> None:
    """A singular heading of something a person has several of heads one entry of a list:
    the second allergy replaced the first, which was still true."""
    km = KnowledgeMemory(UserFactory())
    km.remember(first, "personal", persistent=True)
    assert km.store(second, "personal", persistent=True).action == "created", (first, second)
    assert sorted(f.content for f in km.live_facts()) == sorted([first, second])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Allergies: peanuts, shellfish", "Allergies: peanuts"),  # the whole list, changed
        ("Favourite hobby: chess", "Favourite hobby: painting"),
    ],
)
def test_a_list_or_the_one_favourite_still_supersedes(old: str, new: str) -> None:
    km = KnowledgeMemory(UserFactory())
    first = km.store(old, "personal", persistent=True).fact
    assert km.store(new, "personal", persistent=True).superseded_ids == (first.pk,), (old, new)
