"""@tool: schemas from signatures and docstrings, validation, sync and async calls."""

from __future__ import annotations

import pytest

from tulip_nb.tools import Interrupt, Tool, ToolArgumentsInvalid, tool


@tool(idempotent=True)
def lookup_order(order_id: str, include_items: bool = False) -> dict[str, object]:
    """Look up an order by id.

    More detail that the model does not need.

    Args:
        order_id: The order id, e.g. ``ord-4821``.
        include_items: Whether to list
            the order's items.

    Returns:
        The order.
    """
    return {"order_id": order_id, "items": [] if include_items else None}


def test_schema_from_signature_and_docstring() -> None:
    schema = lookup_order.schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "lookup_order"
    assert fn["description"] == "Look up an order by id."
    params = fn["parameters"]
    assert params["required"] == ["order_id"]
    assert params["properties"]["order_id"] == {"type": "string", "description": "The order id, e.g. ``ord-4821``."}
    assert params["properties"]["include_items"]["description"] == "Whether to list the order's items."
    assert params["properties"]["include_items"]["default"] is False
    assert lookup_order.idempotent and isinstance(lookup_order, Tool)


def test_decorator_forms_and_direct_call() -> None:
    @tool
    def plain(x: int) -> int:
        """Double."""
        return 2 * x

    named = tool(name="renamed", description="Custom.")(lambda y: y)
    assert plain(3) == 6
    assert plain.name == "plain" and not plain.idempotent
    assert named.name == "renamed" and named.description == "Custom."


async def test_invoke_validates_and_coerces() -> None:
    assert await lookup_order.invoke({"order_id": "ord-1"}) == {"order_id": "ord-1", "items": None}
    with pytest.raises(ToolArgumentsInvalid, match="order_id"):
        await lookup_order.invoke({})
    with pytest.raises(ToolArgumentsInvalid, match="surprise"):
        await lookup_order.invoke({"order_id": "x", "surprise": 1})
    with pytest.raises(ToolArgumentsInvalid):
        await lookup_order.invoke({"order_id": "x", "include_items": "not a bool"})


async def test_async_tool() -> None:
    @tool
    async def fetch(url: str) -> str:
        """Fetch."""
        return url.upper()

    assert fetch.is_async
    assert await fetch.invoke({"url": "a"}) == "A"


def test_interrupt_carries_question_and_payload() -> None:
    e = Interrupt("Approve?", {"amount": 5})
    assert e.question == "Approve?" and e.payload == {"amount": 5}
