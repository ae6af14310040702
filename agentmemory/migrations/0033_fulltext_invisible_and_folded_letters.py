"""Full-text indexes see two more things of the normal form
(``agentmemory.recall.text.search_text``): invisible format characters inside a word are
left out (the soft hyphen, zero-width space, non-joiner and joiner, the word joiner, the byte
order mark: "pass\\u200bword" and Persian "می\\u200cخواهم" were cut in two by both
databases' tokenizers), and letters whose diacritic Unicode does not decompose are written
plainly ("Łódź" as "Lodz", "Straße" as "Strasse", "ı" as "i", the Greek final sigma as "σ").
Rows of facts, messages and LangGraph store items holding a character that is not ASCII are
indexed again (ASCII text has the same normal form as before): on PostgreSQL
``agentmemory_tsvector`` is replaced and those rows are rewritten in place (a stored
generated column is computed again on an update; indexes, partitions and their settings are
kept), on SQLite the FTS5 tables are filled anew through ``agentmemory_search_text``. The
statements are written in this module as it runs them; going back puts 0025's function back
and indexes the rows again."""

from django.db import migrations

#: migration 0025's normal form of ``body`` (a SQL expression of ``text``)
MARKS_0025 = (
    "'[\\u0300-\\u036f\\u0591-\\u05bd\\u05bf\\u05c1-\\u05c2\\u05c4-\\u05c5\\u05c7\\u0610-\\u061a"
    "\\u0640\\u064b-\\u065f\\u0670\\u06d6-\\u06dc\\u06df-\\u06e4\\u06e7-\\u06e8\\u06ea-\\u06ed"
    "\\u08d3-\\u08e1\\u08e3-\\u08ff\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f]'"
)
#: this migration's: the marks and the invisible format characters
MARKS_0033 = MARKS_0025[:-2] + "\\u00ad\\u180e\\u200b-\\u200f\\u2060-\\u2064\\ufeff]'"


def _form_0025(body: str) -> str:
    return f"normalize(regexp_replace(normalize({body}, NFKD), {MARKS_0025}, '', 'g'), NFC)"


def _form_0033(body: str) -> str:
    composed = f"normalize(regexp_replace(normalize({body}, NFKD), {MARKS_0033}, '', 'g'), NFC)"
    for letter, plain in (("ß", "ss"), ("ẞ", "SS"), ("æ", "ae"), ("Æ", "AE"), ("œ", "oe"), ("Œ", "OE")):
        composed = f"replace({composed}, '{letter}', '{plain}')"
    return f"translate({composed}, 'ıłŁøØđĐħĦς', 'ilLoOdDhHσ')"


def _function(form):  # type: ignore[no-untyped-def]
    whole, cut = "COALESCE(body, '')", "left(body, 100000)"
    return (
        "CREATE OR REPLACE FUNCTION agentmemory_tsvector(body text) RETURNS tsvector LANGUAGE "
        "plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$ BEGIN RETURN "
        f"to_tsvector('english'::regconfig, CASE WHEN {whole} ~ '^[[:ascii:]]*$' THEN {whole} "
        f"ELSE {form(whole)} END); EXCEPTION WHEN program_limit_exceeded THEN RETURN "
        f"to_tsvector('english'::regconfig, CASE WHEN {cut} ~ '^[[:ascii:]]*$' THEN {cut} "
        f"ELSE {form(cut)} END); END $$"
    )


#: the tables whose full-text index holds the normal form of ``content`` (the LangGraph
#: store's only when ``agentmemory.contrib.langgraph`` is installed)
TABLES = ("agentmemory_fact", "agentmemory_message", "agentmemory_langgraph_storeitem")


def _run(schema_editor, form):  # type: ignore[no-untyped-def]
    connection = schema_editor.connection
    tables = [t for t in TABLES if t in connection.introspection.table_names()]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_encoding")
            if cursor.fetchone()[0].upper().replace("-", "") != "UTF8":
                return
        schema_editor.execute(_function(form))
        for table in tables:
            schema_editor.execute(f"UPDATE {table} SET content = content WHERE content !~ '^[[:ascii:]]*$'")
    elif connection.vendor == "sqlite":
        names = connection.introspection.table_names()
        for table in tables:
            if f"{table}_fts" in names:
                schema_editor.execute(f"INSERT INTO {table}_fts({table}_fts) VALUES ('delete-all')")
                schema_editor.execute(
                    f"INSERT INTO {table}_fts(rowid, content) SELECT id, "
                    f"agentmemory_search_text(content) FROM {table}"
                )


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, _form_0033)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, _form_0025)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0032_message_fulltext_no_pending_list_again"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
