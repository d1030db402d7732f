"""Marketplace reranking: reorder search results with live listing and shopper features.

Listing views and purchases are pushed as events. For each search, the candidate
listings' live features (views, buyers, conversion, price level) and the shopper's own
features are fetched in one ``batch_get`` and combined into a score; the results are
printed in the new order.

Run: ``python examples/marketplace_reranking.py [URL]`` — without a URL a private server
is started for the run (embed mode).
"""

from __future__ import annotations

import sys
from typing import Any

import beava as bv


@bv.event
class ListingView(bv.Event):
    listing_id: str
    shopper_id: str
    category: str
    price: float


@bv.event
class Purchase(bv.Event):
    listing_id: str
    shopper_id: str
    amount: float


@bv.table(key="listing_id")
def ListingDemand(views: ListingView) -> bv.Table:
    return views.group_by("listing_id").agg(
        views_1h=bv.count(window="1h"),
        viewers_1h=bv.n_unique("shopper_id", window="1h"),
    )


@bv.table(key="listing_id")
def ListingSales(purchases: Purchase) -> bv.Table:
    return purchases.group_by("listing_id").agg(
        sales_1h=bv.count(window="1h"),
        buyers_1h=bv.n_unique("shopper_id", window="1h"),
    )


@bv.table(key="shopper_id")
def ShopperTaste(views: ListingView) -> bv.Table:
    return views.group_by("shopper_id").agg(
        typical_price=bv.quantile("price", q=0.5, window="1d"),
        favourite_category=bv.top_k("category", k=1, window="1d"),
    )


LISTINGS = {
    "lamp-01": ("home", 45.0), "lamp-02": ("home", 180.0), "desk-07": ("office", 320.0),
    "chair-03": ("office", 95.0), "rug-11": ("home", 60.0),
}


def activity() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    views: list[dict[str, Any]] = []
    purchases: list[dict[str, Any]] = []
    traffic = {"lamp-01": 9, "lamp-02": 14, "desk-07": 6, "chair-03": 5, "rug-11": 3}
    for listing, n in traffic.items():
        category, price = LISTINGS[listing]
        for i in range(n):
            views.append({"listing_id": listing, "shopper_id": f"s{i % 7}",
                          "category": category, "price": price})
    sold = {"lamp-01": 4, "chair-03": 3, "rug-11": 2, "lamp-02": 1}
    for listing, n in sold.items():
        for i in range(n):
            purchases.append({"listing_id": listing, "shopper_id": f"s{i}",
                              "amount": LISTINGS[listing][1]})
    # the shopper we rerank for browses cheap home goods
    for listing in ("rug-11", "lamp-01", "lamp-01"):
        category, price = LISTINGS[listing]
        views.append({"listing_id": listing, "shopper_id": "alice", "category": category,
                      "price": price})
    return views, purchases


def score(listing: str, demand: dict[str, Any], sales: dict[str, Any],
          taste: dict[str, Any]) -> float:
    views = demand.get("views_1h", 0)
    conversion = sales.get("sales_1h", 0) / views if views else 0.0
    category, price = LISTINGS[listing]
    favourite = taste.get("favourite_category") or []
    category_match = 1.0 if favourite and favourite[0]["value"] == category else 0.0
    typical = taste.get("typical_price") or price
    price_fit = 1.0 / (1.0 + abs(price - typical) / typical)
    score: float = round(2.0 * conversion + 0.5 * category_match + price_fit + 0.01 * views, 4)
    return score


def main(url: str | None = None) -> int:
    with bv.App(url, test_mode=url is None) as app:
        app.register(ListingView, Purchase, ListingDemand, ListingSales, ShopperTaste)
        views, purchases = activity()
        app.push_many("ListingView", views)
        app.push_many("Purchase", purchases)

        shopper = "alice"
        candidates = sorted(LISTINGS)  # the search engine's text-relevance order
        requests: list[tuple[str, Any]] = [("ShopperTaste", shopper)]
        for listing in candidates:
            requests += [("ListingDemand", listing), ("ListingSales", listing)]
        rows = app.batch_get(requests)
        taste = rows[0]
        print(f"shopper {shopper}: {taste}")
        scored = []
        for i, listing in enumerate(candidates):
            demand, sales = rows[1 + 2 * i], rows[2 + 2 * i]
            scored.append((score(listing, demand, sales, taste), listing, demand, sales))
        print("\nreranked results (decision: show in this order)")
        for rank, (value, listing, demand, sales) in enumerate(
                sorted(scored, key=lambda s: (-s[0], s[1])), start=1):
            print(f"{rank}. {listing:<9} score {value:.3f}  views {demand.get('views_1h', 0):>2}"
                  f"  sales {sales.get('sales_1h', 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
