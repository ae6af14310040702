"""How to install an optional extra of this package, the way the package itself was installed.

An editable install from a checkout (``pip install -e .``, what ``make`` does) stays editable
only when the extra is installed with ``-e`` too: ``pip install '/path/to/checkout[o200k]'``
installs a regular copy over it, and later edits of the checkout no longer take effect. pip
records how a distribution was installed in its ``direct_url.json`` (PEP 610), which is read
here.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import metadata
from urllib.parse import unquote, urlparse

__all__ = ["DISTRIBUTION", "pip_install"]

#: the distribution's name (its import name is ``agentmemory``)
DISTRIBUTION = "django-agentmemory"


@lru_cache(maxsize=1)
def _installed_from() -> tuple[str, bool] | None:
    """``(local path, editable)`` of an install from a folder or a file (a checkout, a wheel),
    or ``None`` for one from an index or an unknown source."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        record = json.loads(text or "null")
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("url"), str):
        return None
    url = urlparse(record["url"])
    if url.scheme != "file" or "vcs_info" in record:
        return None
    info = record.get("dir_info")
    editable = isinstance(info, dict) and info.get("editable") is True
    return unquote(url.path), editable


def pip_install(extra: str) -> str:
    """The command that installs the optional extra ``extra`` (``"o200k"``, ``"langchain"``)
    into this environment, as this package was installed (PEP 610's ``direct_url.json``):

    * editable, from a checkout: ``pip install -e '/path/to/checkout[extra]'``, which keeps
      it editable;
    * from a folder or a wheel file: ``pip install '/path/to/it[extra]'``;
    * otherwise: ``pip install 'django-agentmemory[extra]'``.
    """
    found = _installed_from()
    if found is None:
        return f"pip install '{DISTRIBUTION}[{extra}]'"
    path, editable = found
    return f"pip install {'-e ' if editable else ''}'{path}[{extra}]'"
