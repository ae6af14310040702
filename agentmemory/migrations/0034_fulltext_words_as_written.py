"""PostgreSQL's full-text index sees the words that recall's queries and SQLite's index see.

PostgreSQL's text-search parser reads some runs of characters as one token of their own: an
e-mail address ("bob@example.com"), a host, a URL or a file path, a version ("v1.2.3"), a
signed or decimal number ("-1234", "3.14") and anything between angle brackets that looks
like an HTML tag ("<hello world>" was left out entirely). A query is made of the words
between punctuation (``agentmemory.recall.text.word_runs``), as SQLite's FTS5 tokenizer
reads stored text, so on PostgreSQL "bob@example.com", "A-1234", "2024-05-01"'s "05" and the
words inside "<...>" were never found. ``agentmemory_tsvector`` now reads ASCII punctuation
and the General Punctuation block (curly quotes, dashes, the ellipsis) as spaces before the
parser runs.

Both databases also leave out the variation selectors (U+FE00-U+FE0F, U+E0100-U+E01EF) as
they do other invisible characters (``agentmemory.recall.text.INVISIBLE_RANGES``):
"coffee\\ufe0f" and "\\u2764\\ufe0fParis" kept their words from being found.

Rows are indexed again: on PostgreSQL the rows of facts, messages and LangGraph store items
whose stored ``search_vector`` differs from the new one are rewritten in place (every row's
vector is computed once to compare, only the rows that change are written: 9-10 seconds for
100,000 chat messages on a loaded 2-core machine, more for long texts); on SQLite
the FTS5 tables are filled anew. Going back puts 0033's function back and indexes the rows
again."""

import importlib

from django.db import migrations

_0033 = importlib.import_module("agentmemory.migrations.0033_fulltext_invisible_and_folded_letters")

#: this migration's marks: 0033's and the variation selectors
MARKS_0034 = _0033.MARKS_0033[:-2] + "\\ufe00-\\ufe0f\\U000e0100-\\U000e01ef]'"
#: ASCII punctuation ``!-/ :-@ [-` {-~`` (no quote or backslash inside, so the literal reads
#: the same whatever ``standard_conforming_strings`` says)
ASCII_PUNCTUATION = "'[!-/:-@[-`{-~]'"
#: and the General Punctuation block's punctuation (U+2010-U+2027, U+2030-U+205E)
PUNCTUATION = "'[!-/:-@[-`{-~\\u2010-\\u2027\\u2030-\\u205e]'"


def _form_0034(body: str) -> str:
    marks = _0033.MARKS_0033
    form = _0033._form_0033(body).replace(marks, MARKS_0034)
    return f"regexp_replace({form}, {PUNCTUATION}, ' ', 'g')"


def _function_0034() -> str:
    whole, cut = "COALESCE(body, '')", "left(body, 100000)"

    def read(text: str) -> str:
        return (
            f"to_tsvector('english'::regconfig, CASE WHEN {text} ~ '^[[:ascii:]]*$' THEN "
            f"regexp_replace({text}, {ASCII_PUNCTUATION}, ' ', 'g') ELSE {_form_0034(text)} END)"
        )

    return (
        "CREATE OR REPLACE FUNCTION agentmemory_tsvector(body text) RETURNS tsvector LANGUAGE "
        "plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$ BEGIN RETURN "
        f"{read(whole)}; EXCEPTION WHEN program_limit_exceeded THEN RETURN {read(cut)}; END $$"
    )


def _run(schema_editor, function):  # type: ignore[no-untyped-def]
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        # SQLite: the full-text tables filled anew through agentmemory_search_text, as 0033 does
        _0033._run(schema_editor, _0033._form_0033)
        return
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_encoding")
        if cursor.fetchone()[0].upper().replace("-", "") != "UTF8":
            return
    schema_editor.execute(function)
    for table in [t for t in _0033.TABLES if t in connection.introspection.table_names()]:
        schema_editor.execute(
            f"UPDATE {table} SET content = content "
            "WHERE search_vector IS DISTINCT FROM agentmemory_tsvector(content::text)"
        )


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, _function_0034())


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, _0033._function(_0033._form_0033))


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0033_fulltext_invisible_and_folded_letters"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
