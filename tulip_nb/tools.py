"""Tools: plain Python functions an agent may call.

Decorate a function with :func:`tool` and pass it to ``Agent(tools=[...])``. The JSON schema the
model sees is built from the signature (types, defaults) and the docstring (first paragraph = the
description, a Google-style ``Args:`` section = the parameter descriptions)::

    from tulip_nb.tools import tool

    @tool(idempotent=True)
    def lookup_order(order_id: str) -> dict:
        \"\"\"Look up an order by id.

        Args:
            order_id: The order id, e.g. ``ord-4821``.
        \"\"\"
        return {"order_id": order_id, "status": "delivered"}

    lookup_order.schema()["function"]["parameters"]["required"]   # ['order_id']

Sync and async functions both work (sync ones run in a worker thread so they do not block the
event loop). Arguments are validated with pydantic before the call; invalid arguments and any
exception the tool raises become an error *result* that the model reads
(``"Error: <ExcType>: <msg>"``), never a crash of the run.

``idempotent=True`` means "same arguments, same effect": when the model calls the tool again in the
same thread with identical arguments, the agent returns the recorded result instead of running it
(also when a resume after a crash re-issues the call).

A tool pauses the run for a human by raising :class:`Interrupt`; ``agent.resume(answer,
thread_id=...)`` later answers the call with ``answer`` and the run continues.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tulip_nb.core.errors import TulipNBError, UserError

__all__ = ["Interrupt", "Tool", "ToolArgumentsInvalid", "ToolError", "ToolNotFound", "tool"]


class Interrupt(Exception):
    """Raised by a tool to pause the run and ask a human ``question``.

    The agent saves the thread, returns a result with ``stop_reason == "interrupted"`` and the
    question, and :meth:`tulip_nb.agent.Agent.resume` answers the pending call later, in this
    process or another one. ``payload`` (JSON-serialisable) travels with the question.
    """

    def __init__(self, question: str, payload: Any = None) -> None:
        self.question = question
        self.payload = payload
        super().__init__(question)


class ToolError(TulipNBError):
    """A tool call that could not be made; rendered to the model as an error result."""


class ToolNotFound(ToolError):
    """The model asked for a tool the agent does not have."""


class ToolArgumentsInvalid(ToolError):
    """The model's arguments are not valid JSON or do not match the tool's schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_SECTION_HEADER = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a docstring with an optional ``Args:`` section."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    i = 0
    while i < len(lines) and not _ARGS_HEADER.match(lines[i]) and not _SECTION_HEADER.match(lines[i]):
        desc.append(lines[i])
        i += 1
    current: str | None = None
    in_args = False
    for line in lines[i:]:
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if _SECTION_HEADER.match(line) and not line.startswith((" ", "\t")):
            in_args, current = False, None
            continue
        if not in_args:
            continue
        m = _ARG_LINE.match(line)
        if m and line.startswith((" ", "\t")) and len(line) - len(line.lstrip()) <= 4:
            current = m.group(1).lstrip("*")
            params[current] = m.group(3).strip()
        elif current and line.strip():
            params[current] = (params[current] + " " + line.strip()).strip()
    text = "\n".join(desc).strip()
    first_paragraph = text.split("\n\n", 1)[0].replace("\n", " ").strip()
    return first_paragraph, params


class Tool:
    """A callable the agent offers to the model (see the module docstring).

    ``name``, ``description`` and ``parameters`` (JSON schema) are what the model sees;
    :meth:`schema` gives the OpenAI-style function definition. ``await tool.invoke(arguments)``
    validates the arguments and calls the function.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc_desc, doc_params = _parse_docstring(getattr(fn, "__doc__", None))
        self.description = description if description is not None else doc_desc
        self.idempotent = idempotent
        self.is_async = inspect.iscoroutinefunction(fn)
        self._args_model = None if parameters is not None else self._build_model(fn, doc_params)
        self.parameters = parameters if parameters is not None else self._json_schema()
        self.__doc__ = fn.__doc__
        self.__name__ = self.name

    def _build_model(self, fn: Callable[..., Any], docs: dict[str, str]) -> type[BaseModel]:
        sig = inspect.signature(fn)
        try:
            hints = inspect.get_annotations(fn, eval_str=True)
        except Exception:  # unresolvable forward refs: fall back to Any for those
            hints = {}
        fields: dict[str, Any] = {}
        for pname, param in sig.parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = hints.get(pname, Any)
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, Field(default, description=docs.get(pname)))
        return create_model(f"{self.name}_args", __base__=_Strict, **fields)

    def _json_schema(self) -> dict[str, Any]:
        assert self._args_model is not None
        schema = self._args_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
        return schema

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style ``{"type": "function", "function": {...}}`` definition."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments, or :class:`ToolArgumentsInvalid` saying what is wrong."""
        if self._args_model is None:
            return dict(arguments)
        try:
            model = self._args_model.model_validate(arguments)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
                for err in e.errors(include_url=False)
            )
            raise ToolArgumentsInvalid(f"invalid arguments for {self.name}: {problems}") from e
        return {k: getattr(model, k) for k in type(model).model_fields}

    async def invoke(self, arguments: dict[str, Any]) -> Any:
        """Validate ``arguments`` and call the function (sync ones in a worker thread)."""
        kwargs = self.validate_arguments(arguments)
        if self.is_async:
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):  # a sync wrapper that returns a coroutine
            return await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (tools stay ordinary functions)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        flags = ", idempotent=True" if self.idempotent else ""
        return f"Tool({self.name!r}{flags})"


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None, /, *, name: str | None = None, description: str | None = None, idempotent: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a function: ``@tool`` or ``@tool(idempotent=True, name=...)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        if isinstance(f, Tool):
            return f
        if not callable(f):
            raise UserError(f"@tool needs a function, got {type(f).__name__}")
        return Tool(f, name=name, description=description, idempotent=idempotent)

    return wrap(fn) if fn is not None else wrap


def as_tool(obj: Tool | Callable[..., Any] | Callable[..., Awaitable[Any]]) -> Tool:
    """Coerce a plain function (or a Tool) into a Tool; used by ``Agent(tools=[...])``."""
    return obj if isinstance(obj, Tool) else tool(obj)
