"""A small pipeline the inspection tests share: card payments, spend per user, visits per
(user, merchant)."""

from __future__ import annotations

import beava as bv


@bv.event
class Card(bv.Event):
    user_id: str
    merchant: str
    amount: float


@bv.table(key="user_id")
def CardSpend(c: Card) -> bv.Table:  # noqa: N802
    return c.group_by("user_id").agg(spend=bv.sum("amount"), n=bv.count(window="1h"))


@bv.table(key=["user_id", "merchant"])
def CardMerchant(c: Card) -> bv.Table:  # noqa: N802
    return c.group_by("user_id", "merchant").agg(visits=bv.count())
