"""Generate the example warehouse: a messy CRM extract and a history of signal events.

The data looks like what a CRM export really holds, so the example DAGs show the normalisation,
deduplication and reject rules at work instead of a clean happy path:

* ``crm_accounts``: one row per account, the website written every way people write it
  (``https://www.Acme.com/``, ``ACME.COM.``, ``acme.com:443/pricing``, international names), ARR,
  plan, owner, a health score, a JSON metadata blob and a renewal date; a few duplicates (the same
  account entered twice with another spelling of its website) and a few rows without a usable
  website.
* ``crm_contacts``: people of those accounts, emails in mixed case with stray spaces, phone numbers
  in national and international formats, personas as comma strings, some missing names, some
  duplicated, some with an invalid email or phone.
* ``signal_events``: ten days of events for the three signals of the demo configuration
  (``page_visit`` Event, ``seats_used`` Metric, ``deal_stage`` State), plus a few bad rows and a slug
  the service does not know.

Two snapshots of the CRM: ``--snapshot previous`` (a week ago) and ``current`` (today, the
default), a week of CRM work apart: new accounts and people, changed ARR and titles, people who
left. Syncing the first then the second shows adds, updates and deletes.

Everything is derived from ``--seed``: the same seed writes the same rows. The SQLite warehouse is
written by default (``.demo/warehouse.db``); ``--postgres-url`` also loads PostgreSQL.

Usage::

    python examples/generate_data.py [--seed 7] [--snapshot current|previous]
                                     [--sqlite PATH | --no-sqlite] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SQLITE_PATH = REPO_ROOT / ".demo" / "warehouse.db"
DEFAULT_SEED = 7

# The event history covers [HISTORY_START, HISTORY_START + HISTORY_DAYS): the signal_backfill DAG
# runs one daily interval per day of it (its start_date and end_date repeat these two values).
HISTORY_START = date(2026, 11, 1)
HISTORY_DAYS = 10

ACCOUNTS_TABLE = "crm_accounts"
CONTACTS_TABLE = "crm_contacts"
EVENTS_TABLE = "signal_events"

# (canonical domain, company name, home phone region). A few internationalised names: the CRM
# holds them in Unicode, the service compares them once normalised.
COMPANIES: list[tuple[str, str, str]] = [
    ("acme.com", "Acme Corporation", "US"),
    ("globex.com", "Globex", "US"),
    ("initech.io", "Initech", "US"),
    ("umbrella-health.com", "Umbrella Health", "US"),
    ("hooli.com", "Hooli", "US"),
    ("piedpiper.net", "Pied Piper", "US"),
    ("stark-industries.com", "Stark Industries", "US"),
    ("wayne-enterprises.com", "Wayne Enterprises", "US"),
    ("cyberdyne.ai", "Cyberdyne Systems", "US"),
    ("soylent.co", "Soylent", "US"),
    ("tyrell.io", "Tyrell Corporation", "US"),
    ("wonka.com", "Wonka Industries", "US"),
    ("vandelay.com", "Vandelay Industries", "US"),
    ("dunder-mifflin.com", "Dunder Mifflin", "US"),
    ("oscorp.com", "Oscorp", "US"),
    ("massive-dynamic.com", "Massive Dynamic", "US"),
    ("gringotts.co.uk", "Gringotts", "GB"),
    ("brightwell.co.uk", "Brightwell Analytics", "GB"),
    ("thamesdata.co.uk", "Thames Data", "GB"),
    ("northwind.co.uk", "Northwind Traders", "GB"),
    ("bücher-haus.de", "Bücher Haus GmbH", "DE"),
    ("müller-logistik.de", "Müller Logistik", "DE"),
    ("zahnrad.de", "Zahnrad AG", "DE"),
    ("kraftwerk-software.de", "Kraftwerk Software", "DE"),
    ("café-lumière.fr", "Café Lumière", "FR"),
    ("rivegauche.fr", "Rive Gauche SAS", "FR"),
    ("orbitale.fr", "Orbitale", "FR"),
    ("nordlys.no", "Nordlys AS", "NO"),
    ("fjordtech.no", "Fjordtech", "NO"),
    ("zürich-finanz.ch", "Zürich Finanz", "CH"),
    ("alpenblick.ch", "Alpenblick", "CH"),
    ("maplecloud.ca", "Maple Cloud", "CA"),
    ("polarbyte.ca", "Polarbyte", "CA"),
    ("kangaroo-labs.com.au", "Kangaroo Labs", "AU"),
    ("southerncross.com.au", "Southern Cross Freight", "AU"),
    ("sakura-systems.jp", "Sakura Systems", "JP"),
    ("bluefin.io", "Bluefin", "US"),
    ("quantix.ai", "Quantix", "US"),
    ("ledgerly.com", "Ledgerly", "US"),
    ("brightpath.org", "BrightPath Foundation", "US"),
    ("copperleaf.com", "Copperleaf", "US"),
    ("greenfield.io", "Greenfield", "US"),
    ("helixbio.com", "Helix Bio", "US"),
    ("ironclad-security.com", "Ironclad Security", "US"),
    ("junipergrid.com", "Juniper Grid", "US"),
    ("kestrel.dev", "Kestrel", "US"),
    ("lumenworks.com", "Lumenworks", "US"),
    ("meridian-health.com", "Meridian Health", "US"),
    ("novacart.com", "Novacart", "US"),
    ("oakridge.io", "Oakridge", "US"),
]

# Accounts created in the week between the "previous" and the "current" snapshot.
NEW_COMPANIES: list[tuple[str, str, str]] = [
    ("tidewater.io", "Tidewater", "US"),
    ("fernhill.co.uk", "Fernhill Partners", "GB"),
]

# Websites with no usable domain: each of these account rows must be rejected with a reason.
UNUSABLE_WEBSITES: list[str | None] = [None, "   ", "n/a", "http://localhost:8080/"]

OWNERS = ["Maria Lopez", "Dev Patel", "Hannah Schmidt", "Tom Okafor", "Aiko Tanaka"]
INDUSTRIES = ["software", "healthcare", "logistics", "finance", "retail", "manufacturing", "media"]
PLAN_FOR_ARR = [(0, "free"), (20_000, "team"), (150_000, "enterprise")]

FIRST_NAMES = [
    "James", "Olivia", "Liam", "Emma", "Noah", "Ava", "Mateo", "Sofía", "Lukas", "Zoë",
    "Chloé", "Jürgen", "Amélie", "Søren", "Priya", "Wei", "Yuki", "Fatima", "Omar", "Grace",
    "Ethan", "Mia", "Lucas", "Isla", "Henrik", "Ingrid", "Kenji", "Ana", "Pierre", "Léa",
]  # fmt: skip
LAST_NAMES = [
    "Smith", "Johnson", "García", "Müller", "Dubois", "Rossi", "Nakamura", "O'Brien", "Kowalski",
    "Nguyen", "Hansen", "van der Berg", "Schneider", "Martin", "Patel", "Chen", "Brown", "Lefèvre",
    "Andersson", "Fischer", "Silva", "Cohen", "Taylor", "Moreau", "Weber",
]  # fmt: skip
TITLES = [
    "CEO", "CTO", "VP Engineering", "Head of Data", "Director of Sales Operations", "RevOps Manager",
    "Data Engineer", "Procurement Lead", "CFO", "Product Manager", "IT Director", "Security Architect",
]  # fmt: skip
# Personas as CRM users type them: keys, labels, spaces, odd case, empty.
PERSONA_SPELLINGS = [
    "champion",
    "Champion, decision_maker",
    "economic_buyer",
    "technical_evaluator,champion",
    "Decision_Maker",
    " champion ,  technical_evaluator ",
    "",
    None,
]

# Area codes per region, and how numbers are written there (national and international forms).
US_AREA_CODES = ["212", "312", "415", "512", "617", "646", "720", "206"]


@dataclass
class Dataset:
    """The generated rows, table by table, as plain dicts in insertion order."""

    accounts: list[dict[str, Any]] = field(default_factory=list)
    contacts: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def messy_website(domain: str, rng: random.Random) -> str:
    """Write ``domain`` the way a person might type it into a CRM's website field."""
    forms = [
        domain,
        f"https://www.{domain}/",
        f"http://{domain}",
        f"www.{domain}",
        domain.upper() + ".",
        f"{domain}:443/pricing",
        f"  https://{domain.capitalize()}/about-us?utm_source=crm  ",
        f"WWW.{domain.upper()}",
    ]
    return rng.choice(forms)


def phone_number(region: str, rng: random.Random) -> str:
    """A plausible phone number, in a format people use in ``region``."""
    if region in ("US", "CA"):
        area = rng.choice(US_AREA_CODES) if region == "US" else rng.choice(["416", "604", "514"])
        exchange = rng.randint(201, 989)
        line = rng.randint(1000, 9999)
        return rng.choice(
            [
                f"({area}) {exchange}-{line}",
                f"{area}.{exchange}.{line}",
                f"+1 {area} {exchange} {line}",
                f"1-{area}-{exchange}-{line}",
            ]
        )
    if region == "GB":
        block = rng.randint(1000, 9999)
        return rng.choice([f"020 7946 {block}", f"+44 20 7946 {block}", f"0044 20 7946 {block}"])
    if region == "DE":
        block = rng.randint(100000, 999999)
        return rng.choice([f"+49 30 {block}", f"+49 (0)30 {block}"])
    if region == "FR":
        pairs = " ".join(f"{rng.randint(10, 99)}" for _ in range(4))
        return f"+33 1 {pairs}"
    if region == "NO":
        return f"+47 22 {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)}"
    if region == "CH":
        return f"+41 44 {rng.randint(200, 999)} {rng.randint(10, 99)} {rng.randint(10, 99)}"
    if region == "AU":
        local = f"{rng.randint(8000, 9999)} {rng.randint(1000, 9999)}"
        return rng.choice([f"+61 2 {local}", f"(02) {local}"])
    return f"+81 3-{rng.randint(3000, 6999)}-{rng.randint(1000, 9999)}"


def ascii_local_part(name: str) -> str:
    """Email local parts in most CRMs are ASCII: strip accents and spaces from a name."""
    table = str.maketrans("áàâäãéèêëíìîïóòôöõúùûüñçøåæœß", "aaaaaeeeeiiiiooooouuuuncoaaos")
    return "".join(ch for ch in name.lower().translate(table) if ch.isalnum())


def email_domain(domain: str) -> str:
    """Mail domain of an account: international names get an ASCII mail domain, as most do."""
    if domain.isascii():
        return domain
    name, suffix = domain.split(".", maxsplit=1)
    return f"{ascii_local_part(name)}.{suffix}"


def messy_email(first: str, last: str, domain: str, rng: random.Random) -> str:
    local = f"{ascii_local_part(first)}.{ascii_local_part(last)}"
    address = f"{local}@{email_domain(domain)}"
    return rng.choice(
        [
            address,
            address.title(),
            f" {address} ",
            address.upper(),
            f"{local.capitalize()}@{email_domain(domain)}",
        ]
    )


def crm_id(prefix: str, rng: random.Random) -> str:
    """A Salesforce-looking 15-character record id."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(rng.choice(alphabet) for _ in range(15 - len(prefix)))


def plan_for(arr: float) -> str:
    return [plan for threshold, plan in PLAN_FOR_ARR if arr >= threshold][-1]


def new_account(domain: str, name: str, region: str, rng: random.Random) -> dict[str, Any]:
    """One CRM account row (``region`` and ``canonical_domain`` are kept for the generator only)."""
    arr = round(rng.choice([0, 0, rng.uniform(5_000, 60_000), rng.uniform(60_000, 900_000)]), 2)
    metadata = {
        "industry": rng.choice(INDUSTRIES),
        "employees": rng.choice([12, 45, 180, 750, 2_400, 12_000]),
        "hq": {"country": region},
        "tags": sorted(rng.sample(["expansion", "at-risk", "referenceable", "beta", "partner"], 2)),
    }
    return {
        "account_id": crm_id("001", rng),
        "company_name": name if rng.random() > 0.2 else f" {name}  ",
        "website": messy_website(domain, rng),
        "annual_revenue": arr,
        "plan": plan_for(arr),
        "account_owner": rng.choice(OWNERS) if rng.random() > 0.1 else None,
        "health_score": round(rng.uniform(20, 99), 1),
        "metadata": json.dumps(metadata, ensure_ascii=False),
        "renewal_date": (HISTORY_START + timedelta(days=rng.randint(20, 400))).isoformat() if arr else None,
        "region": region,
        "canonical_domain": domain,
    }


def generate_accounts(rng: random.Random) -> list[dict[str, Any]]:
    accounts = [new_account(domain, name, region, rng) for domain, name, region in COMPANIES]
    # The same account entered twice, its website spelled another way: a duplicate key.
    for original in rng.sample(accounts, 3):
        duplicate = dict(original, account_id=crm_id("001", rng))
        duplicate["website"] = messy_website(original["canonical_domain"], rng)
        accounts.append(duplicate)
    for website in UNUSABLE_WEBSITES:
        accounts.append(
            {
                "account_id": crm_id("001", rng),
                "company_name": "Unknown prospect",
                "website": website,
                "annual_revenue": None,
                "plan": "free",
                "account_owner": None,
                "health_score": None,
                "metadata": None,
                "renewal_date": None,
                "region": "US",
                "canonical_domain": None,
            }
        )
    rng.shuffle(accounts)
    return accounts


def new_contact(account: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One CRM contact of ``account``, its fields as messy as people type them."""
    domain = account["canonical_domain"]
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    has_email = rng.random() > 0.12
    has_phone = rng.random() > 0.4
    has_profile = rng.random() > 0.5
    return {
        "contact_id": crm_id("003", rng),
        "account_website": messy_website(domain, rng),
        "first_name": first,
        "last_name": last if rng.random() > 0.05 else None,
        "email": messy_email(first, last, domain, rng) if has_email else None,
        "phone": phone_number(account["region"], rng) if has_phone or not has_email else None,
        "job_title": rng.choice(TITLES),
        "profile_url": (
            f"https://www.network.example/in/{ascii_local_part(first)}-{ascii_local_part(last)}-"
            f"{rng.randint(1000, 9999)}/?trk=crm"
            if has_profile
            else None
        ),
        "personas": rng.choice(PERSONA_SPELLINGS),
    }


def generate_contacts(accounts: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    contacts: list[dict[str, Any]] = []
    seen_domains: set[str] = set()
    for account in accounts:
        if account["canonical_domain"] is None or account["canonical_domain"] in seen_domains:
            continue
        seen_domains.add(account["canonical_domain"])
        contacts.extend(new_contact(account, rng) for _ in range(rng.randint(2, 7)))
    # The same person entered twice, the second time with the email in another case.
    for original in rng.sample([c for c in contacts if c["email"]], 4):
        duplicate = dict(original, contact_id=crm_id("003", rng))
        duplicate["email"] = original["email"].strip().swapcase()
        contacts.append(duplicate)
    # Rows a person has to fix in the CRM: no first name, a broken email, a broken phone number.
    broken = rng.sample(contacts, 6)
    broken[0]["first_name"] = None
    broken[1]["first_name"] = "  "
    broken[2]["email"] = "jane.doe@@example.com"
    broken[3]["email"] = "no-email-on-file"
    broken[4]["phone"] = "12"
    broken[4]["email"] = None
    broken[5]["phone"] = "call reception"
    broken[5]["email"] = None
    rng.shuffle(contacts)
    return contacts


def generate_events(
    accounts: list[dict[str, Any]], contacts: list[dict[str, Any]], rng: random.Random
) -> list[dict[str, Any]]:
    valid_accounts = [a for a in accounts if a["canonical_domain"]]
    deals = [crm_id("006", rng) for _ in range(15)]
    stages = ["discovery", "qualification", "proposal", "negotiation", "closed_won", "closed_lost"]
    events: list[dict[str, Any]] = []

    def add(day: date, signal: str, object_type: str, object_id: str | None, payload: Any) -> None:
        moment = datetime(day.year, day.month, day.day, tzinfo=timezone.utc) + timedelta(
            seconds=rng.randint(60, 86_340)
        )
        events.append(
            {
                "event_id": f"evt_{len(events) + 1:06d}",
                "occurred_at": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "signal": signal,
                "object_type": object_type,
                "object_id": object_id,
                "payload": payload if isinstance(payload, str) else json.dumps(payload),
            }
        )

    for offset in range(HISTORY_DAYS):
        day = HISTORY_START + timedelta(days=offset)
        for _ in range(rng.randint(25, 45)):
            contact = rng.choice(contacts)
            path = rng.choice(["/pricing", "/docs/getting-started", "/blog/list-sync", "/security", "/"])
            add(
                day,
                "page_visit",
                "contact",
                contact["contact_id"],
                {"path": path, "seconds": rng.randint(3, 600)},
            )
        for account in rng.sample(valid_accounts, 12):
            add(day, "seats_used", "account", account["account_id"], {"seats": rng.randint(1, 400)})
        for deal in rng.sample(deals, 4):
            add(
                day,
                "deal_stage",
                "deal",
                deal,
                {"stage": rng.choice(stages), "amount": rng.randint(5, 200) * 1000},
            )
    # What an events table collects over time: a typo of a slug, rows with no object, a broken
    # timestamp and a payload that is not JSON.
    add(HISTORY_START + timedelta(days=2), "page_view", "contact", contacts[0]["contact_id"], {"path": "/"})
    add(
        HISTORY_START + timedelta(days=4),
        "page_view",
        "contact",
        contacts[1]["contact_id"],
        {"path": "/docs"},
    )
    add(HISTORY_START + timedelta(days=3), "seats_used", "account", None, {"seats": 3})
    add(
        HISTORY_START + timedelta(days=5),
        "page_visit",
        "contact",
        contacts[2]["contact_id"],
        "{path: /pricing",
    )
    events.sort(key=lambda event: event["occurred_at"])
    return events


def a_week_of_crm_changes(previous: Dataset, rng: random.Random) -> Dataset:
    """What a week in the CRM does to ``previous``: the changes a nightly sync has to carry over.

    Two new accounts with their people, new ARR and health scores for a few accounts, people
    promoted or given a phone number, new people at existing accounts, and a few who left.
    """
    accounts = [dict(a) for a in previous.accounts]
    contacts = [dict(c) for c in previous.contacts]
    valid = [a for a in accounts if a["canonical_domain"]]
    for account in rng.sample(valid, 5):
        account["annual_revenue"] = round((account["annual_revenue"] or 8_000) * rng.uniform(1.2, 2.5), 2)
        account["plan"] = plan_for(account["annual_revenue"])
        account["health_score"] = round(rng.uniform(20, 99), 1)
    rng.choice(valid)["account_owner"] = rng.choice(OWNERS)
    identified = [c for c in contacts if c["email"] and c["first_name"] and "@@" not in c["email"]]
    for contact in rng.sample(identified, 8):
        contact["job_title"] = rng.choice(TITLES)
    for contact in rng.sample([c for c in identified if not c["phone"]], 2):
        contact["phone"] = (
            "+1 " + f"{rng.choice(US_AREA_CODES)} {rng.randint(201, 989)} {rng.randint(1000, 9999)}"
        )
    leavers = {c["contact_id"] for c in rng.sample(identified, 6)}
    contacts = [c for c in contacts if c["contact_id"] not in leavers]
    contacts.extend(new_contact(rng.choice(valid), rng) for _ in range(8))
    for domain, name, region in NEW_COMPANIES:
        account = new_account(domain, name, region, rng)
        accounts.append(account)
        contacts.extend(new_contact(account, rng) for _ in range(3))
    return Dataset(accounts=accounts, contacts=contacts)


def generate(seed: int = DEFAULT_SEED, snapshot: str = "current") -> Dataset:
    """Build the example dataset; the same seed gives the same rows.

    :param snapshot: ``"current"``, the CRM today; or ``"previous"``, the CRM a week ago, before
        :func:`a_week_of_crm_changes`: load it first and sync, then load ``"current"`` and sync
        again to see updates and deletes.
    """
    rng = random.Random(seed)
    accounts = generate_accounts(rng)
    dataset = Dataset(accounts=accounts, contacts=generate_contacts(accounts, rng))
    # The changes and the events draw from their own generators, so both snapshots share the
    # previous one's rows exactly.
    if snapshot == "current":
        dataset = a_week_of_crm_changes(dataset, random.Random(f"{seed}-changes"))
    elif snapshot != "previous":
        raise ValueError(f"snapshot must be 'current' or 'previous', not {snapshot!r}")
    dataset.events = generate_events(dataset.accounts, dataset.contacts, random.Random(f"{seed}-events"))
    return dataset


def load(dataset: Dataset, url: str) -> None:
    """(Re)create the three tables at the SQLAlchemy ``url`` and insert the dataset."""
    import sqlalchemy as sa

    metadata = sa.MetaData()
    # Event times are a real timestamp in PostgreSQL; SQLite keeps the ISO text, which still
    # compares correctly with the rendered '{{ data_interval_start }}' of the backfill query.
    event_time = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")
    accounts = sa.Table(
        ACCOUNTS_TABLE,
        metadata,
        sa.Column("account_id", sa.String(18), primary_key=True),
        sa.Column("company_name", sa.Text),
        sa.Column("website", sa.Text),
        sa.Column("annual_revenue", sa.Float),
        sa.Column("plan", sa.Text),
        sa.Column("account_owner", sa.Text),
        sa.Column("health_score", sa.Float),
        sa.Column("metadata", sa.Text),
        sa.Column("renewal_date", sa.Date),
    )
    contacts = sa.Table(
        CONTACTS_TABLE,
        metadata,
        sa.Column("contact_id", sa.String(18), primary_key=True),
        sa.Column("account_website", sa.Text),
        sa.Column("first_name", sa.Text),
        sa.Column("last_name", sa.Text),
        sa.Column("email", sa.Text),
        sa.Column("phone", sa.Text),
        sa.Column("job_title", sa.Text),
        sa.Column("profile_url", sa.Text),
        sa.Column("personas", sa.Text),
    )
    events = sa.Table(
        EVENTS_TABLE,
        metadata,
        sa.Column("event_id", sa.String(16), primary_key=True),
        sa.Column("occurred_at", event_time, index=True),
        sa.Column("signal", sa.Text),
        sa.Column("object_type", sa.Text),
        sa.Column("object_id", sa.Text),
        sa.Column("payload", sa.Text),
    )
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            metadata.drop_all(conn)
            metadata.create_all(conn)
            conn.execute(
                accounts.insert(),
                [
                    {
                        **{k: v for k, v in row.items() if k in accounts.c},
                        "renewal_date": date.fromisoformat(row["renewal_date"])
                        if row["renewal_date"]
                        else None,
                    }
                    for row in dataset.accounts
                ],
            )
            conn.execute(contacts.insert(), dataset.contacts)
            conn.execute(events.insert(), dataset.events)
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--sqlite", type=Path, default=DEFAULT_SQLITE_PATH, help="SQLite warehouse file")
    parser.add_argument("--no-sqlite", action="store_true", help="do not write the SQLite warehouse")
    parser.add_argument("--postgres-url", help="also load into PostgreSQL (a SQLAlchemy URL)")
    parser.add_argument(
        "--snapshot",
        choices=["current", "previous"],
        default="current",
        help="the CRM today (default) or a week ago, before a week of changes",
    )
    args = parser.parse_args(argv)

    dataset = generate(args.seed, args.snapshot)
    targets: list[tuple[str, str]] = []
    if not args.no_sqlite:
        args.sqlite.parent.mkdir(parents=True, exist_ok=True)
        targets.append((str(args.sqlite), f"sqlite:///{args.sqlite.resolve()}"))
    if args.postgres_url:
        targets.append((args.postgres_url.split("@")[-1], args.postgres_url))
    if not targets:
        parser.error("nothing to write: drop --no-sqlite or give --postgres-url")
    for label, url in targets:
        load(dataset, url)
        print(
            f"{label} ({args.snapshot}): {len(dataset.accounts)} accounts, {len(dataset.contacts)} contacts, "
            f"{len(dataset.events)} events"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
