"""Search relevance on a small labelled set, for every store (and for the offline embedder)."""

from __future__ import annotations

from tulip_nb.memory.llm_memory import HashingEmbedder
from tulip_nb.memory.store import BaseStore, InMemoryStore

NS = ("t1", "support", "playbook")

DOCS = {
    "refund-approval": "Refunds over $500 need manager approval before they are issued.",
    "store-credit": "Customer cust-4821 prefers store credit over card refunds.",
    "shipping-berlin": "Orders ship from the Berlin warehouse every Monday and Thursday.",
    "password-reset": "Password resets are done from the login page; support never asks for passwords.",
    "gold-plan": "Gold plan customers get free express shipping and a dedicated account manager.",
    "invoice-vat": "Invoices for EU companies must show the VAT number of the buyer.",
    "return-window": "Items can be returned within 30 days of delivery in their original packaging.",
    "damaged-goods": "Damaged goods are replaced at no cost once the customer sends a photo.",
    "escalation": "Escalate legal threats to the compliance team within one hour.",
    "outage": "During an outage, post status updates every 30 minutes on the status page.",
    "gift-cards": "Gift cards cannot be exchanged for cash.",
    "data-deletion": "Data deletion requests are completed within 14 days under GDPR.",
}

QUERIES = {
    "does a $700 refund need approval from a manager?": "refund-approval",
    "how does cust-4821 like to be refunded": "store-credit",
    "which warehouse ships the orders": "shipping-berlin",
    "customer forgot their password": "password-reset",
    "what do gold plan customers get": "gold-plan",
    "VAT number on invoices": "invoice-vat",
    "can I return an item after delivery? how many days": "return-window",
    "the package arrived damaged": "damaged-goods",
    "the customer threatens legal action": "escalation",
    "how often should we post status updates during an outage": "outage",
    "exchange gift cards for cash": "gift-cards",
    "GDPR data deletion request deadline": "data-deletion",
}


def ranks(results: dict[str, list[str]]) -> tuple[int, int]:
    """(queries whose labelled item is first, queries whose labelled item is in the top 3)."""
    first = sum(1 for q, keys in results.items() if keys[:1] == [QUERIES[q]])
    top3 = sum(1 for q, keys in results.items() if QUERIES[q] in keys[:3])
    return first, top3


async def test_full_text_search_ranks_the_labelled_item_first(store: BaseStore) -> None:
    await store.put_batch([(NS, key, {"content": text}, None) for key, text in DOCS.items()])
    results = {q: [h.key for h in await store.search(NS, query=q, limit=5)] for q in QUERIES}
    first, top3 = ranks(results)
    assert first >= 11, results  # the right item first for (nearly) every query
    assert top3 == len(QUERIES), results


async def test_hashing_embedder_ranks_the_labelled_item_first() -> None:
    embedder = HashingEmbedder()
    async with InMemoryStore() as store:
        vectors = embedder.embed_sync(list(DOCS.values()))
        for (key, text), vec in zip(DOCS.items(), vectors, strict=True):
            await store.put_with_embedding(NS, key, {"content": text}, vec)
        results = {}
        for q in QUERIES:
            [qv] = await embedder.embed([q])
            results[q] = [h.item.key for h in await store.search_by_embedding(NS, qv, limit=5)]
    first, top3 = ranks(results)
    assert first >= 10, results  # lexical: good on shared words, not a semantic model
    assert top3 >= 11, results
