"""The statement each server-side function of ``agentmemory.store.functions`` should
return, as this version of the statements writes it: the text a migration freezes when it
creates the function, and what the tests compare the installed functions with.

Above the statements' modules (``agentmemory.store.window``, ``agentmemory.store.append``)
and ``agentmemory.store.functions``, which they call: nothing on the request path imports it.
"""

from __future__ import annotations

from typing import Any

from agentmemory.store.append import append_one_sql
from agentmemory.store.functions import APPEND_KEYS, GAP, _params, code
from agentmemory.store.gap import _gap_probe_sql
from agentmemory.store.window import _head_sql

__all__ = ["body"]


def body(alias: str, key: tuple[Any, ...]) -> str:
    """The statement the function of ``key`` should return, as this version writes it for
    ``alias``, with its parameters written ``$1``, ``$2`` ... in the order of the function's
    arguments: the text a migration freezes when it creates the function.

    Raises:
        ValueError: the statement has a parameter the function does not take.
    """
    if key in APPEND_KEYS:
        sql = append_one_sql(str(key[1])).strip()
    elif key == GAP:
        sql = _gap_probe_sql(alias, pending=0, pending_array=True)
    else:
        with_pinned, capped = key
        sql = _head_sql(alias, with_pinned=with_pinned, capped=capped)
    for position, (param, _) in enumerate(_params(key), start=1):
        sql = sql.replace(f"%({param})s", f"${position}")
    if "%(" in sql or "%s" in sql:  # a parameter the function does not take
        raise ValueError(f"the {code(key)} statement has a parameter its function does not take")
    return sql
