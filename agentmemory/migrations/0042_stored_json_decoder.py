"""The JSON columns read numbers no Python value holds as their text
(``agentmemory.fields.StoredJSONField``, ``agentmemory.messages.StoredJSONDecoder``).

A row written by hand can hold ``1e400``, an integer of more than 4,300 digits or (in SQLite's
JSON text) ``NaN``; reading it failed every read of the row, a 500 from the API. The columns
themselves do not change (the same type on every database): the fields change in the
migration state only, so no table is rebuilt (SQLite rebuilds a table for any ``AlterField``
it cannot tell is a no-op, which would also drop the message table's full-text triggers)."""

import agentmemory.fields
import agentmemory.messages
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agentmemory', '0041_append_functions_counter_room'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
            migrations.AlterField(
                model_name='conversation',
                name='metadata',
                field=agentmemory.fields.StoredJSONField(blank=True, decoder=agentmemory.messages.StoredJSONDecoder, default=dict, verbose_name='metadata'),
            ),
            migrations.AlterField(
                model_name='conversation',
                name='pending_tool_calls',
                field=agentmemory.fields.StoredJSONField(blank=True, decoder=agentmemory.messages.StoredJSONDecoder, default=dict, editable=False, help_text='Tool calls still awaiting their result: {tool call id: seq of the AI message that made the call}.', verbose_name='pending tool calls'),
            ),
            migrations.AlterField(
                model_name='fact',
                name='metadata',
                field=agentmemory.fields.StoredJSONField(blank=True, decoder=agentmemory.messages.StoredJSONDecoder, default=dict, verbose_name='metadata'),
            ),
            migrations.AlterField(
                model_name='message',
                name='metadata',
                field=agentmemory.fields.StoredJSONField(blank=True, decoder=agentmemory.messages.StoredJSONDecoder, default=dict, verbose_name='metadata'),
            ),
            migrations.AlterField(
                model_name='message',
                name='parts',
                field=agentmemory.fields.StoredJSONField(blank=True, decoder=agentmemory.messages.StoredJSONDecoder, default=None, null=True, verbose_name='content parts'),
            ),
            migrations.AlterField(
                model_name='message',
                name='tool_calls',
                field=agentmemory.fields.StoredJSONField(blank=True, decoder=agentmemory.messages.StoredJSONDecoder, default=list, verbose_name='tool calls'),
            ),
            migrations.AlterField(
                model_name='modelcall',
                name='window_changes',
                field=agentmemory.fields.StoredJSONField(blank=True, decoder=agentmemory.messages.StoredJSONDecoder, default=dict, help_text='How the copy sent differed from storage: left-out seqs, truncated copies (characters kept), stubbed results, placeholder results.', verbose_name='window changes'),
            ),
            ],
        ),
    ]
