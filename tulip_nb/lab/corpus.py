"""Corpora: research over many saved threads — summaries, compaction simulations, sweeps.

A **corpus** is the set of threads of one store (any checkpointer with ``list_threads``, or its
URL) that match a glob. :func:`open_corpus` lists the thread ids and nothing else; the work reads
each thread's headers and latest state when it needs them, **one thread at a time**, and keeps
only the result rows — a 5,000-thread export in S3 or PostgreSQL is never in memory at once::

    from tulip_nb.lab import open_corpus
    from tulip_nb.memory.compactor import LLMCompactor

    corpus = open_corpus("file:./corpus", "case-*")
    s = corpus.summary()                          # one row per thread
    long = corpus.filter(s["tokens"] > 1_500)     # a sub-corpus
    long["case-0017"]                             # a Thread
    sim = long.simulate({"32k": LLMCompactor(context_length=32_000)}, probes=corpus_facts)
    corpus.simulation_summary(sim)                # one row per config

Every method takes ``executor=``: ``None`` (in process), any ``concurrent.futures.Executor``, or a
``dask.distributed.Client`` — the work is split by thread and each worker opens the store from
its URL (:mod:`tulip_nb.lab._executors`; ``docs/corpus.md`` shows a real cluster). Summary columns
and where each count comes from: :mod:`tulip_nb.lab._corpus_rows`. Sync methods work in a
notebook cell; ``aopen_corpus``, ``asummary``, ``asimulate``, ``asweep`` are their async twins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from tulip_nb._deps import require
from tulip_nb._sync import run_sync, sync_twin
from tulip_nb.core.errors import UserError
from tulip_nb.lab._common import esc
from tulip_nb.lab._corpus_frames import FRAME_KINDS, frame_partition, frames_task, typed_frame
from tulip_nb.lab._corpus_rows import (
    ALL_SUMMARY_COLUMNS,
    SIMULATION_COLUMNS,
    STATE_COLUMNS,
    SUMMARY_COLUMNS,
    simulate_task,
)
from tulip_nb.lab._corpus_summary import FALLBACKS, summary_task
from tulip_nb.lab._corpus_sweep import asweep_corpus
from tulip_nb.lab._executors import (
    Progress,
    amap_threads,
    is_dask_client,
    plan_chunks,
    require_picklable,
    worker_source,
)
from tulip_nb.lab._recorded import check_choice
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.lab._thread import Thread, aopen_thread
from tulip_nb.lab.simulate import RECORDED, Configs, Probes, Summarizer, _configs, _schemas, normalize_probes
from tulip_nb.memory.conversation import LLMCompactor, SummarizingConversationManager

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["pending_summary"]

_COUNTS = [
    c
    for c in ALL_SUMMARY_COLUMNS
    if c not in ("thread_id", "forked_from", "first_update", "last_update", "read", "error")
]
_SIM_COUNTS = [c for c in SIMULATION_COLUMNS if c not in ("thread_id", "config", "summarizer", "error")]


def _pd() -> Any:
    return require("pandas")


def _choice(summarizer: Summarizer, name: str) -> Any:
    return summarizer.get(name) if isinstance(summarizer, Mapping) else summarizer


def _shippable(name: str, manager: Any, choice: Any, *, dask: bool) -> Any:
    """``manager`` ready to send to workers, or a :class:`UserError` naming the config.

    Its own summariser travels with it when the simulation will run it (``summarizer=`` "auto"
    or "config"), so it must pickle too; for the other choices it is not used and stays here.
    """
    if manager == RECORDED:
        return manager
    if choice in ("recorded", "length", "none") or callable(choice):
        if isinstance(manager, LLMCompactor):
            manager.summarize_fn = None
        elif isinstance(manager, SummarizingConversationManager):
            manager.summarizer = None
    what = f"config {name!r} ({type(manager).__name__}, with its summariser)"
    require_picklable(what, manager, dask=dask)
    return manager


class Corpus:
    """The threads of one store that match a pattern (see the module docstring).

    ``source`` is the store URL when opened from one (else None), ``checkpointer`` the open store,
    ``thread_ids`` the ids in sorted order. ``len(corpus)``, ``for tid in corpus``;
    ``corpus["t-17"]`` or ``corpus[3]`` is a :class:`~tulip_nb.lab._thread.Thread`; ``corpus[0:10]``,
    ``corpus[["a", "b"]]`` and :meth:`filter` are sub-corpora (same store, shared summary cache).
    :meth:`summary` rows are computed once per corpus family and kept; states are not.
    A corpus opened from a URL owns its checkpointer: :meth:`close` (or ``with``) releases it.
    """

    def __init__(
        self,
        checkpointer: BaseCheckpointer,
        thread_ids: Sequence[str],
        *,
        source: str | None = None,
        owns: bool = False,
        unreadable: Mapping[str, str] | None = None,
        _cache: dict[Any, dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        self.checkpointer = checkpointer
        self.unreadable: dict[str, str] = dict(unreadable or {})
        """What the store holds that could not be listed as a thread (``{name: why}``,
        :meth:`~tulip_nb.memory.checkpointer.BaseCheckpointer.list_unreadable`): each is in
        :attr:`thread_ids` and is a row with its ``error`` in the summary and the frames."""
        self.thread_ids: list[str] = list(thread_ids)
        self.source = source
        self._owns = owns
        self._cache: dict[Any, dict[str, dict[str, Any]]] = _cache if _cache is not None else {}

    def __repr__(self) -> str:
        where = self.source or type(self.checkpointer).__name__
        return f"Corpus({where!r}, threads={len(self.thread_ids)})"

    def __len__(self) -> int:
        return len(self.thread_ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.thread_ids)

    def __contains__(self, thread_id: object) -> bool:
        return thread_id in set(self.thread_ids)

    def _sub(self, ids: Sequence[str]) -> Corpus:
        bad = {t: self.unreadable[t] for t in ids if t in self.unreadable}
        return Corpus(self.checkpointer, ids, source=self.source, unreadable=bad, _cache=self._cache)

    def _unreadable_rows(self) -> list[dict[str, Any]]:
        return [{"thread_id": t, "error": f"CheckpointCorrupt: {why}"} for t, why in self.unreadable.items()]

    @overload
    def __getitem__(self, key: str | int) -> Thread: ...
    @overload
    def __getitem__(self, key: slice | list[str]) -> Corpus: ...
    def __getitem__(self, key: Any) -> Thread | Corpus:
        if isinstance(key, str):
            if key not in self:
                raise KeyError(f"thread {key!r} is not in this corpus ({len(self)} threads)")
            return run_sync(aopen_thread(self.checkpointer, key))
        if isinstance(key, int) and not isinstance(key, bool):
            return self[self.thread_ids[key]]
        if isinstance(key, slice):
            return self._sub(self.thread_ids[key])
        if isinstance(key, Sequence) and all(isinstance(k, str) for k in key):
            return self.filter(thread_ids=list(key))
        raise UserError(f"corpus[...]: give a thread id, a position, a slice or a list of ids, got {key!r}")

    # -- sub-corpora ----------------------------------------------------------------------------
    def filter(
        self,
        pred_or_mask: Callable[[Any], Any] | Sequence[bool] | pd.Series | None = None,
        *,
        thread_ids: Sequence[str] | None = None,
    ) -> Corpus:
        """A sub-corpus: the threads whose :meth:`summary` row satisfies ``pred(row)``, those where
        a boolean mask (a Series aligned with the summary, or a list, one per thread) is True, or
        ``thread_ids=[...]`` (kept in the order given; unknown ids are a :class:`UserError`)."""
        if thread_ids is not None:
            if pred_or_mask is not None:
                raise UserError("filter: give a predicate or mask, or thread_ids=, not both")
            ids = [thread_ids] if isinstance(thread_ids, str) else list(thread_ids)
            mine = set(self.thread_ids)
            missing = [t for t in ids if t not in mine]
            if missing:
                raise UserError(f"filter: {len(missing)} thread ids are not in this corpus: {missing[:5]}")
            return self._sub(ids)
        if pred_or_mask is None:
            raise UserError("filter: give a predicate (row -> bool), a boolean mask or thread_ids=")
        if callable(pred_or_mask):
            summary = self.summary()
            keep = [bool(pred_or_mask(row)) for _, row in summary.iterrows()]
        else:
            keep = self._mask(pred_or_mask)
        return self._sub([t for t, k in zip(self.thread_ids, keep, strict=True) if k])

    def _mask(self, mask: Any) -> list[bool]:
        pd = _pd()
        if isinstance(mask, pd.Series):
            if mask.index.equals(pd.RangeIndex(len(self))):
                values = list(mask)
            elif set(mask.index) == set(self.thread_ids):
                values = [mask[t] for t in self.thread_ids]
            else:
                raise UserError("filter: the mask's index matches neither the summary's rows nor the thread ids")
        else:
            values = list(mask)
        if len(values) != len(self):
            raise UserError(f"filter: the mask has {len(values)} values for {len(self)} threads")
        import numpy as np

        if not all(isinstance(v, (bool, np.bool_)) for v in values):
            raise UserError("filter: the mask must hold booleans (NA is not allowed: use .fillna(False))")
        return [bool(v) for v in values]

    # -- summary --------------------------------------------------------------------------------
    async def asummary(
        self,
        *,
        columns: Sequence[str] | str | None = None,
        fallback: str = "states",
        executor: Any = None,
        progress: Progress = None,
        context_window: int | str | None = None,
        chunk_size: int | None = None,
    ) -> pd.DataFrame:
        """One row per thread, read from headers: each thread's checkpoint listing and the counters
        its newest save recorded (:mod:`tulip_nb.memory.counts`), so no state is loaded and the cost
        per thread does not grow with its length. Columns in
        :data:`~tulip_nb.lab._corpus_rows.SUMMARY_COLUMNS`, each defined in ``docs/corpus.md``.

        Counts are nullable integers: NA where the thread's record cannot tell (a tulip-written
        thread's compactions, for instance), never 0 for unknown. ``read`` says where a row came
        from: ``"headers"``; ``"states"`` for a thread whose newest header has no counters (tulip
        or an older tulip_nb wrote it), read from its states as before (exact, slower); with
        ``fallback="na"`` such a row is ``"partial"`` instead (the listing's columns, NA counters).
        A thread that cannot be read is a row with ``error`` ("<Type>: <msg>") and NA elsewhere.

        ``columns``: the columns to return (default :data:`SUMMARY_COLUMNS`); the state columns
        ``max_call_tokens`` and ``over_window_calls`` (every call's view rebuilt, ``context_window``:
        the window, default the one the thread's manager saved) are read only when named here, or
        with ``columns="all"``. Rows are computed once per corpus family (and per
        ``context_window``, state columns and fallback), then served from the cache.
        ``executor``, ``progress``, ``chunk_size``: as for
        :func:`~tulip_nb.lab._executors.map_threads`."""
        wanted = _summary_columns(columns)
        if fallback not in FALLBACKS:
            raise UserError(f"summary: fallback must be one of {FALLBACKS}, got {fallback!r}")
        state_columns = any(c in STATE_COLUMNS for c in wanted)
        key = ("summary", context_window if state_columns else None, state_columns, fallback)
        rows = self._cache.setdefault(key, {})
        rows.update({r["thread_id"]: r for r in self._unreadable_rows()})
        todo = [t for t in self.thread_ids if t not in rows]
        if todo:
            payload = {"context_window": context_window, "state_columns": state_columns, "fallback": fallback}
            got = await amap_threads(
                summary_task, self, todo, payload, executor=executor, progress=progress, chunk_size=chunk_size
            )
            for row in got:
                rows[row["thread_id"]] = row
        frame = _frame([rows[t] for t in self.thread_ids], ALL_SUMMARY_COLUMNS, _COUNTS)
        return frame[wanted]

    summary = sync_twin(asummary)

    # -- simulation -----------------------------------------------------------------------------
    async def asimulate(
        self,
        configs: Configs,
        probes: Probes | Callable[[Thread], Probes] | None = None,
        *,
        executor: Any = None,
        context_window: int | str | None = None,
        progress: Progress = None,
        tools: Sequence[Any] | None = None,
        chunk_size: int | None = None,
        summarizer: Summarizer = None,
    ) -> pd.DataFrame:
        """The compaction simulator (:func:`~tulip_nb.lab.simulate_compaction`) over every thread
        x config: one row per (thread, config) — ``summarizer`` (who wrote its summaries, as the
        simulator's column says), ``calls``, ``compactions``, ``max_context_tokens``,
        ``tokens_saved`` (summed over calls), ``over_window_calls`` (NA when the window is unknown),
        ``facts`` (probes said before the last call), ``facts_kept`` (of those, seen by the last
        call), ``error``, and one ``probe: <label>`` column per shared probe (True: seen at the
        thread's last call, False: said but no longer seen, None: never said).

        ``configs``: as :func:`~tulip_nb.lab.simulate_compaction` takes them. ``probes``: shared
        (``[(label, text)]``, ``{label: text}``, ``[text]``) or a callable ``thread -> probes``
        (per thread: then only ``facts``/``facts_kept``). ``summarizer``: as
        :func:`~tulip_nb.lab.simulate_compaction` takes it — by default each thread is simulated
        with the config's summariser, else the thread's own (re-imported, else its recorded
        summaries); ``"length"`` for the length model. ``configs="recorded"`` (or that value in the
        mapping) is each thread's own manager. On an out-of-process executor configs, the
        summarisers they run and a probes callable must pickle (:class:`UserError` names the
        config that does not).
        """
        named = _configs(configs, defer=True)
        if isinstance(summarizer, Mapping):
            unknown = sorted(set(map(str, summarizer)) - {n for n, _ in named})
            if unknown:
                raise UserError(f"summarizer={{...}} names configs that are not simulated: {unknown}")
        for n, _ in named:
            check_choice(f"config {n!r}", _choice(summarizer, n))
        per_thread = callable(probes) and not isinstance(probes, (str, Sequence))
        shared = None if per_thread else normalize_probes(probes or ())  # type: ignore[arg-type]
        out_of_process = executor is not None and not _threads_only(executor)
        if out_of_process:
            dask = is_dask_client(executor)
            named = [(n, _shippable(n, m, _choice(summarizer, n), dask=dask)) for n, m in named]
            if per_thread:
                require_picklable("probes (a per-thread callable)", probes, dask=dask)
            if callable(summarizer) or isinstance(summarizer, Mapping):
                require_picklable("summarizer=", summarizer, dask=dask)
        payload = {
            "configs": named,
            "probes": probes if per_thread else shared,
            "context_window": context_window,
            "tools": _schemas(tools),
            "summarizer": summarizer,
        }
        rows = await amap_threads(
            simulate_task, self, self.thread_ids, payload, executor=executor, progress=progress, chunk_size=chunk_size
        )
        names = [n for n, _ in named]
        full = [r for row in rows for r in ([row] if "config" in row else _per_config(row, names))]
        probe_cols = [] if shared is None else [f"probe: {label}" for label, _ in shared]
        frame = _frame(full, SIMULATION_COLUMNS + probe_cols, _SIM_COUNTS)
        for col in probe_cols:
            frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
        return frame

    simulate = sync_twin(asimulate)

    def simulation_summary(self, sim: pd.DataFrame) -> pd.DataFrame:
        """:func:`summarize_corpus_simulation` of ``sim``."""
        return summarize_corpus_simulation(sim)

    # -- tidy frames (tulip_nb.lab._corpus_frames) ----------------------------------------------
    async def aframe(
        self,
        kind: str,
        *,
        executor: Any = None,
        progress: Progress = None,
        chunk_size: int | None = None,
        output: str = "pandas",
        text: bool = False,
    ) -> Any:
        """The tidy frame ``kind`` (``"turns"``, ``"calls"``, ``"messages"``, ``"events"``) over the
        corpus: see :mod:`tulip_nb.lab._corpus_frames` for the columns. ``output="pandas"``
        gathers it here; ``output="dask"`` (with a ``dask.distributed.Client`` as ``executor``)
        returns a lazy dask DataFrame, one partition per chunk, computed on the cluster.
        ``text``: the messages frame with each message's text. The same rows whatever the
        executor; a thread that cannot be read is one row with ``error``."""
        if kind not in FRAME_KINDS:
            raise UserError(f"frame: kind must be one of {FRAME_KINDS}, got {kind!r}")
        if output not in ("pandas", "dask"):
            raise UserError(f"frame: output must be 'pandas' or 'dask', got {output!r}")
        payload = {"kind": kind, "text": text}
        if output == "dask":
            return _dask_frame(self, payload, executor, chunk_size)
        readable = [t for t in self.thread_ids if t not in self.unreadable]
        got = await amap_threads(
            frames_task, self, readable, payload, executor=executor, progress=progress, chunk_size=chunk_size
        )
        by_thread: dict[str, list[dict[str, Any]]] = {r["thread_id"]: [r] for r in self._unreadable_rows()}
        for row in got:
            by_thread.setdefault(row["thread_id"], []).append(row)
        rows = [r for t in self.thread_ids for r in by_thread.get(t, [])]
        return typed_frame(kind, rows, text=text)

    frame = sync_twin(aframe)

    async def aturns(self, **kw: Any) -> Any:
        """One row per turn (:mod:`tulip_nb.lab._corpus_frames`); keywords as :meth:`aframe`."""
        return await self.aframe("turns", **kw)

    async def acalls(self, **kw: Any) -> Any:
        """One row per model call (:mod:`tulip_nb.lab._corpus_frames`); keywords as :meth:`aframe`."""
        return await self.aframe("calls", **kw)

    async def amessages(self, **kw: Any) -> Any:
        """One row per message (:mod:`tulip_nb.lab._corpus_frames`); keywords as :meth:`aframe`."""
        return await self.aframe("messages", **kw)

    async def aevents(self, **kw: Any) -> Any:
        """One row per compaction, interrupt, tool error and failed turn; keywords as :meth:`aframe`."""
        return await self.aframe("events", **kw)

    turns = sync_twin(aturns)
    calls = sync_twin(acalls)
    messages = sync_twin(amessages)
    events = sync_twin(aevents)

    # -- sweep (tulip_nb.lab._corpus_sweep) -----------------------------------------------------
    async def asweep(
        self,
        variants: Any,
        *,
        at: Any = "last_user",
        agent: Any,
        executor: Any = None,
        max_concurrency: int = 8,
        progress: Progress = None,
        budget: Any = None,
        resume: bool = True,
    ) -> pd.DataFrame:
        """One live branch per thread x variant from ``at``: see
        :func:`tulip_nb.lab._corpus_sweep.asweep_corpus` (``budget=``: tokens or money for the whole
        sweep; ``resume=True``: a re-run finishes only what is missing)."""
        result: pd.DataFrame = await asweep_corpus(
            self,
            variants,
            at=at,
            agent=agent,
            executor=executor,
            max_concurrency=max_concurrency,
            progress=progress,
            budget=budget,
            resume=resume,
        )
        return result

    sweep = sync_twin(asweep)

    # -- lifetime -------------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the checkpointer if this corpus opened it from a URL (sub-corpora never do)."""
        if self._owns:
            self._owns = False
            await self.checkpointer.close()

    close = sync_twin(aclose)

    def __enter__(self) -> Corpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Corpus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _repr_html_(self) -> str:
        head = ", ".join(esc(t) for t in self.thread_ids[:5]) + (" …" if len(self) > 5 else "")
        where = esc(self.source or type(self.checkpointer).__name__)
        return f"<b>Corpus</b> <code>{where}</code>: {len(self)} threads ({head})"


def _dask_frame(corpus: Corpus, payload: dict[str, Any], client: Any, chunk_size: int | None) -> Any:
    """A lazy dask DataFrame of the frame ``payload["kind"]``: one partition per chunk of threads."""

    if client is None or not is_dask_client(client):
        raise UserError("frame(output='dask') needs executor= a dask.distributed.Client")
    dd = require("dask.dataframe", feature="frame(output='dask')")
    import dask
    from dask.delayed import delayed

    source = worker_source(corpus, client)
    parts = [
        delayed(frame_partition)(source, chunk, payload) for chunk in plan_chunks(corpus.thread_ids, client, chunk_size)
    ]
    meta = typed_frame(payload["kind"], [], text=bool(payload.get("text")))
    with dask.config.set({"dataframe.convert-string": False}):  # the same dtypes as the pandas frame
        return dd.from_delayed(parts, meta=meta, verify_meta=False) if parts else dd.from_pandas(meta, npartitions=1)


def _summary_columns(columns: Sequence[str] | str | None) -> list[str]:
    """The summary columns asked for (``None``: the default ones; ``"all"``: every one)."""
    if columns is None:
        return list(SUMMARY_COLUMNS)
    if columns == "all":
        return list(ALL_SUMMARY_COLUMNS)
    wanted = [columns] if isinstance(columns, str) else list(columns)
    unknown = [c for c in wanted if c not in ALL_SUMMARY_COLUMNS]
    if unknown:
        raise UserError(f"summary: no column {unknown[0]!r}; columns: {ALL_SUMMARY_COLUMNS}")
    if "thread_id" not in wanted:
        wanted.insert(0, "thread_id")
    return [c for c in ALL_SUMMARY_COLUMNS if c in wanted]


def _threads_only(executor: Any) -> bool:
    from concurrent.futures import ThreadPoolExecutor

    return isinstance(executor, ThreadPoolExecutor)


def _per_config(row: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """A chunk-failure row (thread id and error only) as one row per config."""
    return [{**row, "config": n} for n in names]


def _frame(rows: list[dict[str, Any]], columns: list[str], counts: list[str]) -> pd.DataFrame:
    pd = _pd()
    frame = pd.DataFrame(rows, columns=columns)
    frame["thread_id"] = frame["thread_id"].astype(str)
    for col in counts:
        frame[col] = frame[col].astype("Int64")
    for col in ("first_update", "last_update"):
        if col in frame:
            frame[col] = pd.to_datetime(frame[col], utc=True).astype("datetime64[us, UTC]")
    for col in ("forked_from", "summarizer", "read", "error"):
        if col in frame:
            frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    return frame


def pending_summary(thread_ids: Sequence[str]) -> pd.DataFrame:
    """A summary frame with the ids of ``thread_ids`` and every other cell NA: what a view shows
    while the summary is being read (NA is "not known yet", never 0).

    >>> frame = pending_summary(["a", "b"])
    >>> list(frame["thread_id"]), bool(frame["turns"].isna().all()), str(frame["turns"].dtype)
    (['a', 'b'], True, 'Int64')
    """
    return _frame([{"thread_id": t} for t in thread_ids], ALL_SUMMARY_COLUMNS, _COUNTS)[SUMMARY_COLUMNS]


def summarize_corpus_simulation(sim: pd.DataFrame) -> pd.DataFrame:
    """One row per config of a :meth:`Corpus.simulate` frame: ``threads`` (rows of that config,
    failed ones included), ``compactions`` (total) and ``mean_compactions`` (per thread read),
    ``max_context_tokens`` and ``p95_context_tokens`` (over the threads' largest calls),
    ``summarizer`` (who wrote the summaries), ``threads_over_window`` (threads with at least one
    call over the window), ``over_window_calls`` (total; both NA when no thread's window is
    known), ``facts`` / ``facts_kept`` (totals) and ``kept_fraction``
    (``facts_kept / facts``; NaN without facts), ``tokens_saved`` (total), ``errors`` (rows that
    failed)."""
    pd = _pd()
    rows = []
    for name, g in sim.groupby("config", sort=False):
        ok = g[g["error"].isna()]
        facts, kept = int(ok["facts"].sum()), int(ok["facts_kept"].sum())
        peak = ok["max_context_tokens"].dropna().astype(float)
        over = ok["over_window_calls"].dropna()
        used = dict.fromkeys(v for x in ok["summarizer"] if isinstance(x, str) for v in x.split(", "))
        unknown = len(over) == 0 and len(ok) > 0  # no thread's window known: not 0, NA
        rows.append(
            {
                "config": name,
                "summarizer": ", ".join(used) if used else None,
                "threads": len(g),
                "compactions": int(ok["compactions"].sum()),
                "mean_compactions": float(ok["compactions"].mean()) if len(ok) else float("nan"),
                "max_context_tokens": int(peak.max()) if len(peak) else pd.NA,
                "p95_context_tokens": float(peak.quantile(0.95)) if len(peak) else float("nan"),
                "threads_over_window": pd.NA if unknown else int((over > 0).sum()),
                "over_window_calls": pd.NA if unknown else int(over.sum()),
                "facts": facts,
                "facts_kept": kept,
                "kept_fraction": kept / facts if facts else float("nan"),
                "tokens_saved": int(ok["tokens_saved"].sum()),
                "errors": int(g["error"].notna().sum()),
            }
        )
    cols = [
        "config",
        "summarizer",
        "threads",
        "compactions",
        "mean_compactions",
        "max_context_tokens",
        "p95_context_tokens",
        "threads_over_window",
        "over_window_calls",
        "facts",
        "facts_kept",
        "kept_fraction",
        "tokens_saved",
        "errors",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for col in ("threads_over_window", "over_window_calls"):
        out[col] = out[col].astype("Int64")
    return out


async def aopen_corpus(
    checkpointer_or_url: BaseCheckpointer | str, pattern: str = "*", *, limit: int | None = None
) -> Corpus:
    """The :class:`Corpus` of the threads of ``checkpointer_or_url`` matching the glob ``pattern``
    (at most ``limit``; the store's ``list_threads``), and what the store holds but cannot read
    (:meth:`~tulip_nb.memory.checkpointer.BaseCheckpointer.list_unreadable`: each becomes a row
    with its error, never a missing thread). Only the ids are read here.

    ``checkpointer_or_url``: a checkpointer, or a URL (``"file:./threads"``,
    ``"postgresql://host/db"``, ``"s3://bucket/prefix/"``, ... as
    :func:`~tulip_nb.memory.backends.checkpointer_from_url` takes them) — then ``corpus.source`` is
    that URL, which out-of-process executors hand to their workers.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UserError(f"open_corpus: limit must be None or an int >= 0, got {limit!r}")
    cp, opened = open_checkpointer(checkpointer_or_url)
    try:
        ids = await cp.list_threads(limit=limit, pattern=pattern)
        listed = set(ids)
        bad = {k: v for k, v in (await cp.list_unreadable(pattern)).items() if k not in listed}
    except BaseException:
        if opened:
            await cp.close()
        raise
    if limit is not None:
        bad = dict(list(bad.items())[: max(0, limit - len(ids))])
    source = checkpointer_or_url if isinstance(checkpointer_or_url, str) else None
    return Corpus(cp, sorted([*ids, *bad]), source=source, owns=opened, unreadable=bad)


open_corpus = sync_twin(aopen_corpus)
