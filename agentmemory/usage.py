"""Usage and cost: recorded model calls (``ModelCall``) added up per conversation, agent or
user, priced with ``AGENTMEMORY["MODEL_PRICES"]``.

Prices are per million tokens, in whatever currency the host writes them in, read as
``Decimal`` (never float)::

    AGENTMEMORY = {
        "MODEL_PRICES": {
            "gpt-4o-mini": {"input": "0.15", "output": "0.60", "cached_input": "0.075"},
            "claude-haiku-4-5": {
                "input": "1.00", "output": "5.00",
                "cached_input": "0.10", "cache_creation_input": "1.25",
            },
        }
    }

A call is priced as ``(input - cached - cache writes) * input + cached * cached_input +
cache writes * cache_creation_input + output * output``, divided by 1,000,000 (the two
cache prices default to ``input``). A model is found by its exact name, else by the longest
configured name it starts with followed by ``-`` (providers answer with dated snapshots:
``gpt-4o-mini-2024-07-18`` is priced as ``gpt-4o-mini``). Costs are computed when read,
from the prices configured now: a price change applies to past calls too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Count, Q, QuerySet

from agentmemory.conf import app_settings
from agentmemory.managers import Total
from agentmemory.models import ModelCall, UsageSource

__all__ = [
    "ModelPrice",
    "ModelUsage",
    "UsageTotals",
    "model_price",
    "parse_prices",
    "usage_by",
    "usage_totals",
]

PER_TOKENS = Decimal(1_000_000)
_SUMS = ("input_tokens", "output_tokens", "cached_input_tokens", "cache_creation_input_tokens")


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Prices of one model per million tokens (``Decimal``)."""

    input: Decimal
    output: Decimal
    cached_input: Decimal
    cache_creation_input: Decimal

    def cost(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: int = 0,
        cache_creation_input_tokens: int = 0,
    ) -> Decimal:
        """The cost of these tokens (see the module docstring), not rounded."""
        uncached = max(input_tokens - cached_input_tokens - cache_creation_input_tokens, 0)
        total = (
            uncached * self.input
            + cached_input_tokens * self.cached_input
            + cache_creation_input_tokens * self.cache_creation_input
            + output_tokens * self.output
        )
        return total / PER_TOKENS


def _decimal(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValueError(f"{where} must be a number or a numeric string, not {value!r}")
    try:
        number = Decimal(str(value))  # str(): 0.15 is read as 0.15, not its binary neighbour
    except InvalidOperation:
        raise ValueError(f"{where} must be a number, not {value!r}") from None
    if not number.is_finite() or number < 0:
        raise ValueError(f"{where} must be a finite number >= 0, not {value!r}")
    return number


def parse_prices(raw: Any) -> dict[str, ModelPrice]:
    """``AGENTMEMORY["MODEL_PRICES"]`` as ``ModelPrice``s by model name.

    Raises:
        ValueError: not a dict of dicts, a model without "input" or "output", an unknown
            key, or a price that is not a finite number >= 0 (the system check
            ``agentmemory.E060`` reports the same).
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"MODEL_PRICES must be a dict of model name -> prices, not {type(raw).__name__}")
    prices: dict[str, ModelPrice] = {}
    for model, entry in raw.items():
        if not isinstance(model, str) or not model or not isinstance(entry, Mapping):
            raise ValueError(
                f"MODEL_PRICES[{model!r}] must be a dict such as {{'input': '0.15', 'output': '0.60'}}"
            )
        unknown = set(entry) - {"input", "output", "cached_input", "cache_creation_input"}
        if unknown:
            raise ValueError(f"MODEL_PRICES[{model!r}] has unknown keys {sorted(unknown)}")
        missing = {"input", "output"} - set(entry)
        if missing:
            raise ValueError(f"MODEL_PRICES[{model!r}] needs {sorted(missing)}")
        price_in = _decimal(entry["input"], f"MODEL_PRICES[{model!r}]['input']")
        prices[model] = ModelPrice(
            input=price_in,
            output=_decimal(entry["output"], f"MODEL_PRICES[{model!r}]['output']"),
            cached_input=_decimal(
                entry.get("cached_input", price_in), f"MODEL_PRICES[{model!r}]['cached_input']"
            ),
            cache_creation_input=_decimal(
                entry.get("cache_creation_input", price_in),
                f"MODEL_PRICES[{model!r}]['cache_creation_input']",
            ),
        )
    return prices


def model_price(model: str, prices: Mapping[str, ModelPrice] | None = None) -> ModelPrice | None:
    """The price of ``model``: its exact name, else the longest configured name it starts
    with followed by ``-`` (a dated snapshot); ``None`` when it has none."""
    if prices is None:
        prices = parse_prices(app_settings().MODEL_PRICES)
    found = prices.get(model)
    if found is not None:
        return found
    best = max((name for name in prices if model.startswith(f"{name}-")), key=len, default=None)
    return prices[best] if best is not None else None


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """Usage of one model (tokens) and its cost (``None`` when the model has no price)."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cache_creation_input_tokens: int
    #: calls whose tokens agentmemory counted because the provider reported none
    counted_calls: int
    cost: Decimal | None


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Usage of a set of calls, all models together and per model.

    Attributes:
        calls, input_tokens, output_tokens, cached_input_tokens, cache_creation_input_tokens,
        counted_calls: sums over every model (tokens).
        cost: the cost of the priced models (``Decimal``, per the prices' currency);
            ``None`` when calls were made and none of them was priced (their cost is unknown,
            not zero); ``Decimal(0)`` when there were no calls.
        unpriced_models: models used that have no price: their tokens are in the sums,
            not in ``cost``.
        by_model: one ``ModelUsage`` per model, by name.
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    counted_calls: int = 0
    cost: Decimal | None = Decimal(0)
    unpriced_models: tuple[str, ...] = ()
    by_model: tuple[ModelUsage, ...] = field(default=())


def _annotations() -> dict[str, Any]:
    sums: dict[str, Any] = {name: Total(name) for name in _SUMS}
    return {
        "n_calls": Count("id"),
        "n_counted": Count("id", filter=Q(usage_source=UsageSource.COUNTED)),
        **sums,
    }


def _totals(rows: Iterable[Mapping[str, Any]], prices: Mapping[str, ModelPrice]) -> UsageTotals:
    models: list[ModelUsage] = []
    for row in rows:
        tokens = {name: int(row[name] or 0) for name in _SUMS}
        price = model_price(row["model"], prices)
        models.append(
            ModelUsage(
                model=row["model"],
                calls=row["n_calls"],
                counted_calls=row["n_counted"],
                cost=price.cost(**tokens) if price is not None else None,
                **tokens,
            )
        )
    models.sort(key=lambda m: m.model)
    priced = [m.cost for m in models if m.cost is not None]
    return UsageTotals(
        calls=sum(m.calls for m in models),
        counted_calls=sum(m.counted_calls for m in models),
        # Unknown, not free: a total of 0 would read as "cost nothing" for unpriced calls.
        cost=sum(priced, Decimal(0)) if priced or not models else None,
        unpriced_models=tuple(m.model for m in models if m.cost is None),
        by_model=tuple(models),
        **{name: sum(getattr(m, name) for m in models) for name in _SUMS},
    )


def _window(
    calls: QuerySet[ModelCall], since: datetime | None, until: datetime | None
) -> QuerySet[ModelCall]:
    if since is not None:
        calls = calls.filter(created_at__gte=since)
    if until is not None:
        calls = calls.filter(created_at__lt=until)
    return calls


def usage_totals(
    calls: QuerySet[ModelCall] | None = None,
    *,
    conversation: Any = None,
    owner: Any = None,
    agent_key: str | None = None,
    kind: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> UsageTotals:
    """Usage and cost of recorded calls, in one aggregate query (grouped by model).

    Args:
        calls: the calls to add up (default: all), narrowed by the filters below.
        conversation: a ``Conversation`` or its primary key.
        owner: a user or a user id (the calls billed to that user).
        agent_key: an agent key (exact).
        kind: a ``ModelCallKind`` value ("chat", "compaction", "embedding").
        since, until: ``created_at`` from ``since`` (included) to ``until`` (excluded).

    Raises:
        ValueError: ``MODEL_PRICES`` is malformed (see ``parse_prices``).
    """
    calls = ModelCall.objects.all() if calls is None else calls
    if conversation is not None:
        calls = calls.filter(conversation_id=getattr(conversation, "pk", conversation))
    if owner is not None:
        calls = calls.filter(owner_id=getattr(owner, "pk", owner))
    if agent_key is not None:
        calls = calls.filter(agent_key=agent_key)
    if kind is not None:
        calls = calls.filter(kind=kind)
    calls = _window(calls, since, until)
    prices = parse_prices(app_settings().MODEL_PRICES)
    rows = calls.order_by().values("model").annotate(**_annotations())
    return _totals(rows, prices)


def usage_by(
    group: str,
    calls: QuerySet[ModelCall] | None = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[Any, UsageTotals]:
    """``usage_totals`` for every value of ``group`` in one aggregate query.

    Args:
        group: ``"conversation"``, ``"owner"`` or ``"agent_key"``; keys of the result are
            conversation ids, user ids (``None`` for calls billed to nobody) or agent keys.
        calls, since, until: as for ``usage_totals``.

    Raises:
        ValueError: another ``group``, or malformed ``MODEL_PRICES``.
    """
    columns = {"conversation": "conversation_id", "owner": "owner_id", "agent_key": "agent_key"}
    if group not in columns:
        raise ValueError(f"group must be one of {sorted(columns)}, not {group!r}")
    column = columns[group]
    calls = _window(ModelCall.objects.all() if calls is None else calls, since, until)
    prices = parse_prices(app_settings().MODEL_PRICES)
    grouped: dict[Any, list[Mapping[str, Any]]] = {}
    for row in calls.order_by().values(column, "model").annotate(**_annotations()):
        grouped.setdefault(row[column], []).append(row)
    return {key: _totals(rows, prices) for key, rows in grouped.items()}
