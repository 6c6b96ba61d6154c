"""Text helpers shared by the stores: what of a value is searchable, query terms, BM25.

Full-text search in every store works on the same *searchable text* of a value (its string and
number leaves, in order) and the same *query terms* (lower-cased words, stop words removed), so a
query ranks alike on :class:`InMemoryStore` (pure-Python BM25 below), SQLite FTS5 (``bm25()``) and
PostgreSQL (``ts_rank`` over an ``english`` ``tsvector``). A query matches an item when the item
contains at least one of its terms; more, rarer terms rank higher.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["STOP_WORDS", "bm25_scores", "query_terms", "searchable_text", "stem", "tokens"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

_STOP = """a an and are as at be been but by can could did do does for from had has have how i if in into is
it its me my no not of on or our should so than that the their them then there these they this to
was we were what when where which who why will with would you your"""
STOP_WORDS = frozenset(_STOP.split())


def searchable_text(value: Any) -> str:
    """The text a search looks at: every string and number in ``value`` (dict values, list items)."""
    parts: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            parts.append(v)
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, int | float):
            parts.append(str(v))
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list | tuple):
            for item in v:
                walk(item)

    walk(value)
    return " ".join(parts)


def tokens(text: str) -> list[str]:
    """Lower-cased words of ``text`` (letters and digits; punctuation splits)."""
    return _WORD.findall(text.lower())


def stem(word: str) -> str:
    """A deliberately small English stemmer (plural / -ing / -ed), enough to match "refunds" with
    "refund"; the SQL stores use their own (Porter / Snowball), which agree on these cases."""
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)] + repl
    return word


def query_terms(query: str | None) -> list[str]:
    """Distinct non-stop-word terms of ``query``, in order (``[]`` for ``None`` or blank)."""
    if not query:
        return []
    seen: dict[str, None] = {}
    for word in tokens(query):
        if word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)


def bm25_scores(query: Sequence[str], documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 of each document for the query terms (0.0 for a document matching none)."""
    terms = {stem(t) for t in query}
    docs = [Counter(stem(w) for w in tokens(d)) for d in documents]
    n = len(docs)
    if not n or not terms:
        return [0.0] * n
    avgdl = sum(sum(d.values()) for d in docs) / n or 1.0
    df = {t: sum(1 for d in docs if t in d) for t in terms}
    out = []
    for d in docs:
        length = sum(d.values())
        score = 0.0
        for t in terms:
            tf = d.get(t, 0)
            if tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))
        out.append(score)
    return out


def fts5_query(terms: Iterable[str]) -> str:
    """An FTS5 MATCH expression: any of ``terms`` (each quoted, so no FTS5 syntax leaks in)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
