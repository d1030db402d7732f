"""``bv.demo(name)``: small synthetic datasets generated in code from a fixed seed, so every
call returns the same events (spec/sdk.md §1).

Each dataset is ``{"name", "schema", "events"}``: ``schema`` maps each event name to its
fields (``{field: wire type}``), and every event is a dict whose ``"_event"`` key names its
event, so ``beava.test.replay(app, bv.demo("fraud")["events"])`` pushes them directly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

__all__ = ["DATASETS", "demo"]

Dataset = dict[str, Any]


def _fraud(rng: random.Random) -> Dataset:
    merchants = ["grocer", "fuel", "airline", "electronics", "cafe", "pharmacy", "giftcards"]
    countries = ["US", "US", "US", "CA", "GB", "NG", "BR"]
    users = [f"u{i:03d}" for i in range(40)]
    cards = {u: [f"c{i:03d}{j}" for j in range(rng.randint(1, 3))] for i, u in enumerate(users)}
    fraudsters = set(rng.sample(users, 4))
    events: list[dict[str, Any]] = []
    for n in range(600):
        user = rng.choice(users)
        fraud = user in fraudsters and rng.random() < 0.6
        merchant = rng.choice(merchants[4:] if fraud else merchants)
        amount = rng.uniform(300.0, 2500.0) if fraud else rng.lognormvariate(3.5, 0.8)
        events.append({
            "_event": "Txn",
            "txn_id": f"t{n:05d}",
            "user_id": user,
            "card_id": rng.choice(cards[user]),
            "merchant": merchant,
            "amount": round(amount, 2),
            "country": rng.choice(countries[3:] if fraud else countries),
            "is_fraud": fraud,
        })
    schema = {"Txn": {
        "txn_id": "str", "user_id": "str", "card_id": "str", "merchant": "str",
        "amount": "f64", "country": "str", "is_fraud": "bool",
    }}
    return {"name": "fraud", "schema": schema, "events": events}


def _adtech(rng: random.Random) -> Dataset:
    campaigns = {f"cmp{i}": rng.uniform(0.01, 0.08) for i in range(6)}  # click-through rate
    placements = ["feed", "sidebar", "search", "video"]
    users = [f"u{i:03d}" for i in range(120)]
    events: list[dict[str, Any]] = []
    for n in range(800):
        campaign = rng.choice(list(campaigns))
        ad = f"{campaign}-ad{rng.randint(1, 3)}"
        user = rng.choice(users)
        placement = rng.choice(placements)
        events.append({
            "_event": "Impression",
            "impression_id": f"i{n:05d}",
            "user_id": user,
            "campaign_id": campaign,
            "ad_id": ad,
            "placement": placement,
            "bid_usd": round(rng.uniform(0.2, 4.0), 3),
        })
        if rng.random() < campaigns[campaign] * (2.0 if placement == "search" else 1.0):
            events.append({
                "_event": "Click",
                "impression_id": f"i{n:05d}",
                "user_id": user,
                "campaign_id": campaign,
                "ad_id": ad,
            })
    schema = {
        "Impression": {
            "impression_id": "str", "user_id": "str", "campaign_id": "str", "ad_id": "str",
            "placement": "str", "bid_usd": "f64",
        },
        "Click": {
            "impression_id": "str", "user_id": "str", "campaign_id": "str", "ad_id": "str",
        },
    }
    return {"name": "adtech", "schema": schema, "events": events}


def _ecommerce(rng: random.Random) -> Dataset:
    catalogue = {f"sku{i:03d}": round(rng.uniform(5.0, 250.0), 2) for i in range(30)}
    paths = ["/", "/search", "/deals", "/cart", "/checkout"]
    users = [f"u{i:03d}" for i in range(60)]
    events: list[dict[str, Any]] = []
    orders = 0
    for _ in range(700):
        user = rng.choice(users)
        sku = rng.choice(list(catalogue))
        path = rng.choice([*paths, f"/product/{sku}", f"/product/{sku}"])
        events.append({
            "_event": "PageView",
            "user_id": user,
            "path": path,
            "dwell_ms": int(rng.expovariate(1 / 9000)) + 200,
        })
        if path.startswith("/product/") and rng.random() < 0.15:
            quantity = rng.choice([1, 1, 1, 2, 3])
            orders += 1
            events.append({
                "_event": "Purchase",
                "order_id": f"o{orders:05d}",
                "user_id": user,
                "sku": sku,
                "quantity": quantity,
                "amount": round(catalogue[sku] * quantity, 2),
            })
    schema = {
        "PageView": {"user_id": "str", "path": "str", "dwell_ms": "i64"},
        "Purchase": {
            "order_id": "str", "user_id": "str", "sku": "str", "quantity": "i64",
            "amount": "f64",
        },
    }
    return {"name": "ecommerce", "schema": schema, "events": events}


# name -> (generator, seed)
DATASETS: dict[str, tuple[Callable[[random.Random], Dataset], int]] = {
    "adtech": (_adtech, 7),
    "fraud": (_fraud, 11),
    "ecommerce": (_ecommerce, 13),
}


def demo(name: str) -> Dataset:
    """The bundled demo dataset ``name`` (``adtech``, ``fraud`` or ``ecommerce``):
    ``{"name", "schema", "events"}``, identical on every call. Unknown name: ``ValueError``."""
    entry = DATASETS.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(
            f"unknown demo dataset {name!r}; valid names: {', '.join(sorted(DATASETS))}"
        )
    generate, seed = entry
    return generate(random.Random(seed))
