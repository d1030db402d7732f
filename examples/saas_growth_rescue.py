"""SaaS growth rescue: spot accounts drifting towards churn and pick a rescue play.

Product logins, feature usage and support tickets are pushed as events. Per-account
features (active users, feature adoption, unresolved urgent tickets, time since the last
login) are read live and mapped to a play: CSM call, onboarding nudge, upsell, or none.

Run: ``python examples/saas_growth_rescue.py [URL]`` — without a URL a private server is
started for the run (embed mode).
"""

from __future__ import annotations

import sys
from typing import Any

import beava as bv


@bv.event
class Login(bv.Event):
    account_id: str
    user_id: str


@bv.event
class FeatureUsed(bv.Event):
    account_id: str
    user_id: str
    feature: str


@bv.event
class Ticket(bv.Event):
    account_id: str
    severity: str
    minutes_open: int


@bv.table(key="account_id")
def AccountActivity(logins: Login) -> bv.Table:
    return logins.group_by("account_id").agg(
        active_users_7d=bv.n_unique("user_id", window="7d"),
        logins_7d=bv.count(window="7d"),
        ms_since_login=bv.time_since(),
    )


@bv.table(key="account_id")
def AccountAdoption(usage: FeatureUsed) -> bv.Table:
    return usage.group_by("account_id").agg(
        features_7d=bv.n_unique("feature", window="7d"),
        top_feature=bv.top_k("feature", k=1, window="7d"),
    )


@bv.event
def UrgentTicket(tickets: Ticket) -> bv.Event:
    return tickets.filter(bv.col("severity") == "high").with_columns(
        # i64 / i64 is integer division in expressions: cast first for fractional hours
        hours_open=bv.col("minutes_open").cast("float") / 60
    )


@bv.table(key="account_id")
def AccountSupport(urgent_ticket: bv.Event) -> bv.Table:
    return urgent_ticket.group_by("account_id").agg(
        urgent_tickets_7d=bv.count(window="7d"),
        worst_hours_open=bv.max("hours_open", window="7d"),
    )


SEATS = {"acme": 40, "globex": 25, "initech": 12}


def activity() -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    for i in range(30):  # acme: healthy, broad adoption
        events.append(("Login", {"account_id": "acme", "user_id": f"a{i % 24}"}))
        events.append(("FeatureUsed", {"account_id": "acme", "user_id": f"a{i % 24}",
                                       "feature": ["reports", "alerts", "api", "sso"][i % 4]}))
    for i in range(6):  # globex: few users, one feature, angry tickets
        events.append(("Login", {"account_id": "globex", "user_id": f"g{i % 3}"}))
        events.append(("FeatureUsed", {"account_id": "globex", "user_id": f"g{i % 3}",
                                       "feature": "reports"}))
    for minutes in (95, 400, 30):
        events.append(("Ticket", {"account_id": "globex", "severity": "high",
                                  "minutes_open": minutes}))
    events.append(("Ticket", {"account_id": "acme", "severity": "low", "minutes_open": 10}))
    for i in range(12):  # initech: every seat active, ready for more
        events.append(("Login", {"account_id": "initech", "user_id": f"i{i}"}))
        events.append(("FeatureUsed", {"account_id": "initech", "user_id": f"i{i}",
                                       "feature": ["reports", "alerts", "api"][i % 3]}))
    return events


def play(account: str, activity_row: dict[str, Any], adoption: dict[str, Any],
         support: dict[str, Any]) -> str:
    seats = SEATS[account]
    active = activity_row.get("active_users_7d", 0)
    if support.get("urgent_tickets_7d", 0) >= 2 and active < seats / 4:
        return (f"CSM CALL: {support['urgent_tickets_7d']} urgent tickets (worst open "
                f"{support['worst_hours_open']:.1f} h) and only {active}/{seats} seats active")
    if adoption.get("features_7d", 0) <= 1:
        return "ONBOARDING NUDGE: a single feature in use"
    if active >= seats:
        return f"UPSELL: all {seats} seats active"
    return f"NONE: healthy ({active}/{seats} seats, {adoption.get('features_7d')} features)"


def main(url: str | None = None) -> int:
    with bv.App(url, test_mode=url is None) as app:
        app.register(Login, FeatureUsed, Ticket, UrgentTicket, AccountActivity,
                     AccountAdoption, AccountSupport)
        for event_name, fields in activity():
            app.push(event_name, fields)
        print("rescue plays (decision per account)")
        for account in SEATS:
            rows = app.batch_get([("AccountActivity", account), ("AccountAdoption", account),
                                  ("AccountSupport", account)])
            print(f"{account:>8}: {play(account, *rows)}")
            print(f"{'':>8}  features {rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
