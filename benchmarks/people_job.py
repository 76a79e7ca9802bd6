"""The whole people sync job, three nights, at network distance, on CRM-like data.

Run: ``.venv/bin/python benchmarks/people_job.py [--people N] [--latency SECONDS] [--in-flight 1,4]
[--append-results]``

The data is made deterministic (a seeded ``random.Random``) and looks like a CRM's people export:
N people (100,000 by default) on accounts of skewed sizes (many of one to five people, a few of up
to 400, none above); the account column holds the account's website in every spelling a CRM has
(``https://www.acme.com/``, ``http://Acme.com``, ``acme.com``, ``www.acme.com``,
``https://acme.com/about``...); e-mails in mixed case; 30% of the people without an e-mail (half
of them with a phone, half with only a first and a last name); phones of three countries in their
local formats (US ``(415) 555-0123``, read with the default region US; UK ``+44 20 7946 0958``;
German ``+49 30 12345678``); and about 1% bad rows (an invalid e-mail, an empty website, a website
that is no domain), which the sync rejects.

The emulator (the ``reference`` profile) runs in a child process. Its List holds one account row
per account domain (``domain`` column) and no people. Each run is three nights against a fresh
emulator, each night the whole job (``sync_people`` in mirror mode, accounts in source,
``max_delete_fraction=0.2``, a plan file, ``fail_on_error=False``, a sync state kept across the
three nights, ``max_memory`` at its default) in a child process of its own:

- night 1 fills the empty List from the extract;
- night 2 a week of changes: 5% of the people removed, 5% retitled, 10% new;
- night 3 the same extract as night 2: nothing to write.

Measured per night: wall time (in the night's process, client made to summary returned), the
peak RSS of that process, the write requests the summary counts, every ``/v1`` request the
emulator received during the night (its stats endpoint), the minimum of write requests the caps
allow (per kind, the larger of people / 500 and accounts / 100, from the data made) and the
summary's counts. The job's steps are timed by wrapping, in the night's process, the functions
the people sync calls: read + prepare the extract, read the List, plan, apply, read back, and those
of the sync flow around them: the state read, the plan file written, the state kept (the rest is
"other"), with the process's peak RSS at the end of each step (shown for a night over 1 GB: the
step that raised it). ``people_scaling.py`` runs these nights at a series of sizes.

The matrix: every ``--in-flight`` value (the client's ``max_in_flight``; 1 sends one request at a
time, as the client did before it asked for pages ahead and sent chunks together) at 0 s and at
``--latency`` seconds added by the emulator to every request (a fault rule of kind ``latency``).
The ratios that matter: each night's wall time at the latency over the same run's at 0 s.

Aims (100,000 CRM-like people, 50 ms a request): night 2's wall time <= 2x the same run at 0 ms,
and the fill (night 1) likewise. At 1,000,000 people and 50 ms a request: night 2 <= 3 minutes,
every night <= 1 GB of peak RSS.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from child_emulator import (
    SERVE_FLAG,
    ChildEmulator,
    add_latency,
    all_requests,
    night_figures,
    serve_until_stdin_closes,
)
from people_sync import API_KEY, COLUMN_MAP, TABLE

RESULTS = Path(__file__).with_name("RESULTS.md")
SEED = 20261128
MAX_ACCOUNT = 400
ONE_GB_MIB = 1000**3 / 2**20

FIRST = (  # noqa: SIM905 (names read better as text)
    "James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara Richard "
    "Susan Joseph Jessica Thomas Sarah Charles Karen Christopher Lisa Daniel Nancy Matthew Betty "
    "Anthony Sandra Mark Margaret Donald Ashley Steven Kimberly Andrew Emily Paul Donna Joshua Michelle "
    "Kenneth Carol Kevin Amanda Brian Melissa George Deborah Timothy Stephanie Ronald Rebecca Jason "
    "Sharon Edward Laura Jeffrey Cynthia Ryan Dorothy Jacob Amy Gary Kathleen Nicholas Angela Eric "
    "Shirley Jonathan Emma Stephen Brenda Larry Pamela Justin Nicole Scott Anna Brandon Samantha "
    "Benjamin Katherine Samuel Christine Gregory Debra Alexander Rachel Patrick Carolyn Frank Janet "
    "Raymond Maria Jack Olivia Dennis Heather Jerry Helen Tyler Catherine Aaron Diane Jose Julie Adam "
    "Victoria Nathan Joyce Henry Lauren Zachary Kelly Douglas Christina Peter Ruth Kyle Joan Noah "
    "Virginia Ethan Judith Jeremy Evelyn Walter Hannah Christian Andrea Keith Megan Roger Cheryl "
    "Terry Jacqueline Austin Madison Sean Teresa Gerald Abigail Carl Sophia Harold Martha Dylan Sara "
    "Arthur Gloria Lawrence Janice Jordan Kathryn Jesse Ann Bryan Isabella Billy Judy Bruce Charlotte "
    "Gabriel Julia Joe Grace Logan Amber Alan Alice Juan Jean Albert Denise Willie Frances Elijah "
    "Danielle Wayne Marilyn Randy Natalie Vincent Beverly Mason Diana Roy Brittany Ralph Theresa "
    "Bobby Kayla Russell Alexis Bradley Doris Philip Lori Eugene Tiffany Jürgen Søren Zoë Chloé"
).split()
LAST = (  # noqa: SIM905
    "Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Gonzalez "
    "Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark "
    "Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green Adams "
    "Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts Gomez Phillips Evans Turner Diaz Parker "
    "Cruz Edwards Collins Reyes Stewart Morris Morales Murphy Cook Rogers Gutierrez Ortiz Morgan Cooper "
    "Peterson Bailey Reed Kelly Howard Ramos Kim Cox Ward Richardson Watson Brooks Chavez Wood James "
    "Bennett Gray Mendoza Ruiz Hughes Price Alvarez Castillo Sanders Patel Myers Long Ross Foster "
    "Jimenez Powell Jenkins Perry Russell Sullivan Bell Coleman Butler Henderson Barnes Gonzales Fisher "
    "Vasquez Simmons Romero Jordan Patterson Alexander Hamilton Graham Reynolds Griffin Wallace Moreno "
    "West Cole Hayes Bryant Herrera Gibson Ellis Tran Medina Aguilar Stevens Murray Ford Castro "
    "Marshall Owens Harrison Fernandez McDonald Woods Washington Kennedy Wells Vargas Henry Chen "
    "Freeman Webb Tucker Guzman Burns Crawford Olson Simpson Porter Hunter Gordon Mendez Silva Shaw "
    "Snyder Mason Dixon Munoz Hunt Hicks Holmes Palmer Wagner Black Robertson Boyd Rose Stone Salazar "
    "Fox Warren Mills Meyer Rice Schmidt Garza Daniels Ferguson Nichols Stephens Soto Weaver Ryan "
    "Gardner Payne Grant Dunn Kelley Spencer Hawkins Arnold Pierce Vazquez Hansen Peters Santos Hart "
    "Bradley Knight Elliott Cunningham Duncan Armstrong Hudson Carroll Lane Riley Andrews Alvarado Ray "
    "Delgado Berry Perkins Hoffman Johnston Matthews Pena Richards Contreras Willis Carpenter Lawrence "
    "Sandoval Guerrero George Chapman Rios Estrada Ortega Watkins Greene Nunez Wheeler Valdez Harper "
    "Burke Larson Santiago Maldonado Morrison Franklin Carlson Austin Dominguez Carr Lawson Jacobs "
    "O'Brien Lynch Singh Vega Bishop Montgomery Oliver Jensen Harvey Williamson Gilbert Dean Sims "
    "Espinoza Howell Li Wong Reid Hanson Le McCoy Garrett Burton Fuller Wang Weber Welch Rojas Lucas "
    "Marquez Fields Park Yang Little Banks Padilla Day Walsh Bowman Schultz Luna Fowler Mejia Davidson "
    "Acosta Brewer May Holland Juarez Newman Pearson Curtis Cortez Douglas Schneider Joseph Barrett "
    "Navarro Figueroa Keller Avila Wade Molina Stanley Hopkins Campos Barnett Bates Chambers Caldwell "
    "Beck Lambert Miranda Byrd Craig Ayala Lowe Frazier Powers Neal Leonard Gregory Carrillo Sutton "
    "Fleming Rhodes Shelton Schwartz Norris Jennings Watts Duran Walters Cohen McDaniel Moran Parks "
    "Steele Vaughn Becker Holt DeLeon Barker Terry Hale Leon Hail Benson Haynes Horton Miles Lyons "
    "Pham Graves Bush Thornton Wolfe Warner Cabrera McKinney Mann Zimmerman Dawson Lara Fletcher Page "
    "McCarthy Love Robles Cervantes Solis Erickson Reeves Chang Klein Salinas Fuentes Baldwin Daniel "
    "Simon Velasquez Hardy Higgins Aguirre Lin Cummings Chandler Sharp Barber Bowen Ochoa Dennis "
    "Robbins Liu Ramsey Francis Griffith Paul Blair Müller Schröder Weiß Groß Köhler Brontë Núñez"
).split()
TITLES = (
    "Engineer",
    "Senior Engineer",
    "Staff Engineer",
    "Engineering Manager",
    "VP Engineering",
    "CTO",
    "Product Manager",
    "Head of Product",
    "Designer",
    "Data Scientist",
    "Account Executive",
    "Sales Manager",
    "VP Sales",
    "Marketing Manager",
    "CMO",
    "Customer Success Manager",
    "Head of Operations",
    "CFO",
    "Recruiter",
    "CEO",
)
WORDS = (  # noqa: SIM905
    "acme globex initech umbrella hooli vandelay soylent stark wayne wonka cyberdyne tyrell "
    "massive northwind contoso fabrikam litware proseware adatum tailspin wingtip woodgrove "
    "blue red green silver golden iron cedar maple harbor summit river canyon prairie coastal"
).split()
SUFFIXES = ("", "labs", "tech", "systems", "group", "analytics", "cloud", "health", "media", "works")
TLDS = ("com", "com", "com", "io", "co.uk", "de", "net", "ai", "co")
US_AREAS = (415, 212, 312, 617, 206, 512, 303, 404)


# -- the CRM-like data --------------------------------------------------------------------------


@dataclass(slots=True)
class Person:
    """One person of the CRM: as the export spells them, and whether their row is bad."""

    account: int
    website: str
    first: str
    last: str
    email: str
    phone: str
    title: str
    bad: bool


@dataclass
class Crm:
    """The accounts (their domains) and the people of the three nights' extracts."""

    domains: list[str]
    first_night: list[Person]
    second_night: list[Person]

    @staticmethod
    def make(people: int, seed: int = SEED) -> Crm:
        rng = random.Random(seed)
        sizes: list[int] = []
        total = 0
        while total < people:
            sizes.append(min(MAX_ACCOUNT, int(rng.paretovariate(1.1))))
            total += sizes[-1]
        sizes[-1] -= total - people
        domains = [
            f"{rng.choice(WORDS)}{rng.choice(SUFFIXES)}{number}.{rng.choice(TLDS)}"
            for number in range(len(sizes))
        ]
        names: list[set[tuple[str, str]]] = [set() for _ in sizes]
        counter = iter(range(10**9))

        def new_person(account: int) -> Person:
            number = next(counter)
            while True:
                first, last = rng.choice(FIRST), rng.choice(LAST)
                if (first, last) not in names[account]:
                    names[account].add((first, last))
                    break
            domain = domains[account]
            kind = rng.random()
            email = phone = ""
            if kind < 0.70:
                email = _spelled_email(rng, f"{first}.{last}".replace("'", ""), domain)
                if rng.random() < 0.4:
                    phone = _phone(rng, number)
            elif kind < 0.85:
                phone = _phone(rng, number)
            website, bad = _website(rng, domain), False
            if rng.random() < 0.01:
                bad = True
                flaw = rng.randrange(3)
                if flaw == 0:
                    email = rng.choice((f"{first}.{last}@", f"{first} {last} at {domain}", f"{first}@{last}"))
                elif flaw == 1:
                    website = ""
                else:
                    website = rng.choice(("N/A", "localhost", "-"))
            return Person(account, website, first, last, email, phone, rng.choice(TITLES), bad)

        first_night = [new_person(account) for account, size in enumerate(sizes) for _ in range(size)]
        removed = set(rng.sample(range(people), people // 20))
        kept = [index for index in range(people) if index not in removed]
        retitled = set(rng.sample(kept, people // 20))
        counts = list(sizes)
        for index in removed:
            counts[first_night[index].account] -= 1
        second_night = []
        for index in kept:
            person = first_night[index]
            if index in retitled:
                title = rng.choice([title for title in TITLES if title != person.title])
                person = Person(**{**_fields(person), "title": title})
            second_night.append(person)
        for _ in range(people // 10):
            while True:  # a new colleague, more likely at a larger account; none above MAX_ACCOUNT
                account = first_night[rng.randrange(people)].account
                if counts[account] < MAX_ACCOUNT:
                    counts[account] += 1
                    break
            second_night.append(new_person(account))
        return Crm(domains, first_night, second_night)


def _fields(person: Person) -> dict[str, Any]:
    return {name: getattr(person, name) for name in Person.__slots__}


def _website(rng: random.Random, domain: str) -> str:
    """The account's website as someone typed it into the CRM."""
    shown = domain.capitalize()
    return rng.choice(
        (
            f"https://www.{domain}/",
            f"http://{shown}",
            domain,
            f"www.{domain}",
            f"https://{domain}/about",
            f"HTTPS://WWW.{domain.upper()}",
            f"{shown}/",
            f"https://{domain}/?utm_source=crm",
            f" {domain} ",
        )
    )


def _spelled_email(rng: random.Random, local: str, domain: str) -> str:
    spelling = rng.randrange(4)
    if spelling == 0:
        return f"{local}@{domain}".lower()
    if spelling == 1:
        return f"{local}@{domain}"
    if spelling == 2:
        return f"{local}@{domain}".upper()
    return f"{local.lower()}@{domain.capitalize()}"


def _phone(rng: random.Random, number: int) -> str:
    """A phone in its country's local format, unique to ``number``."""
    country = rng.random()
    if country < 0.6:
        area = US_AREAS[number % len(US_AREAS)]
        return f"({area}) {200 + (number // 10_000) % 800}-{number % 10_000:04d}"
    if country < 0.8:
        return f"+44 20 7{(number // 10_000) % 1000:03d} {number % 10_000:04d}"
    return f"+49 30 {10_000_000 + number % 90_000_000}"


def write_extract(people: Iterable[Person], path: Path) -> int:
    rows = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMN_MAP)
        for p in people:
            writer.writerow((p.website, p.email, p.first, p.last, p.title, p.phone))
            rows += 1
    return rows


def minimum_requests(people: list[Person]) -> int:
    """The fewest write requests that can carry ``people`` (the good ones): 500 people and 100
    accounts a request."""
    good = [p for p in people if not p.bad]
    accounts = len({p.account for p in good})
    return max(math.ceil(len(good) / 500), math.ceil(accounts / 100)) if good else 0


def minimum_writes(crm: Crm) -> list[int]:
    """The minimum write requests of nights 1, 2 and 3 (per kind, summed). Night 2 deletes only the
    people removed from accounts still in the extract (``delete_scope="accounts_in_source"``)."""
    before = {(p.account, p.first, p.last): p for p in crm.first_night}
    after = {(p.account, p.first, p.last) for p in crm.second_night}
    in_source = {p.account for p in crm.second_night if not p.bad}
    removed = [p for key, p in before.items() if key not in after and p.account in in_source]
    changed, new = [], []
    for p in crm.second_night:
        old = before.get((p.account, p.first, p.last))
        if old is None:
            new.append(p)
        elif old is not p:
            changed.append(p)
    night2 = sum(minimum_requests(kind) for kind in (new, changed, removed))
    return [minimum_requests(crm.first_night), night2, 0]


# -- the emulator, in a child process -----------------------------------------------------------


def serve_emulator(domains_path: Path) -> None:
    """Child process: an emulator whose List holds one account row per domain and no people."""
    from listsync.emulator import EmulatorConfig, ListConfig, create_app
    from listsync.emulator.config import ColumnConfig
    from listsync.emulator.store import Row

    config = EmulatorConfig(
        secret_keys=[API_KEY],
        profile="reference",
        lists=[ListConfig(id=TABLE, account_column="domain", columns=[ColumnConfig(id="domain")])],
    )
    app = create_app(config)
    state = app.state.emulator.state
    lst = state.lists[TABLE]
    for domain in domains_path.read_text(encoding="utf-8").split():
        row_id = state.new_row_id()
        lst.rows[row_id] = Row(row_id, {"domain": domain}, "2026-01-01T00:00:00.000Z")
    lst.changed()
    serve_until_stdin_closes(app)


# -- one night, in a child process --------------------------------------------------------------

STEPS = {
    "prepare_people": "read + prepare",
    "list_frame": "read List",
    "plan_people_sync": "plan",
    "apply_people_plan": "apply",
    "verify_people": "read back",
}
#: The steps of the one sync flow (``listsync.sync.job``) around them.
JOB_STEPS = {"load_state": "state read", "write_requested_plan": "plan file", "save_state": "state keep"}


def night(url: str, extract: Path, state: str, plan: str, in_flight: int, dry_run_memory: str | None) -> None:
    """Child process: one whole ``sync_people`` of ``extract`` (a dry run with ``max_memory`` at
    ``dry_run_memory`` when given); print its figures as JSON. The steps timed are the functions
    the people sync calls (the names ``listsync.sync.people.sync`` uses)."""
    from listsync.client import ListSyncClient
    from listsync.extract.sources import read_extract
    from listsync.sync import SyncSettings
    from listsync.sync import job as job_module
    from listsync.sync.people import sync as module
    from listsync.sync.people import sync_people
    from listsync.sync.settings import MAX_MEMORY_AUTO

    def job() -> dict[str, Any]:
        with ListSyncClient(url, API_KEY, timeout=120.0, max_in_flight=in_flight) as client:
            return sync_people(
                client,
                TABLE,
                read_extract(extract, arrow_text=True),  # as the people operator reads it
                COLUMN_MAP,
                mode="mirror",
                delete_scope="accounts_in_source",
                settings=SyncSettings(
                    max_delete_fraction=0.2,
                    plan_path=plan,
                    fail_on_error=False,
                    state_path=state,
                    dry_run=dry_run_memory is not None,
                    max_memory=dry_run_memory or MAX_MEMORY_AUTO,
                ),
            )

    print(json.dumps(night_figures(job, module, STEPS, {job_module: JOB_STEPS})))


def run_night(
    url: str,
    extract: Path,
    folder: Path,
    in_flight: int,
    script: str = __file__,
    dry_run_memory: str | None = None,
) -> dict[str, Any]:
    """One night: ``script --night extract`` in a process of its own (its state and plan file in
    ``folder``; a dry run with that ``max_memory`` when ``dry_run_memory`` is given); its figures,
    with every ``/v1`` request the emulator received meanwhile."""
    command = [sys.executable, script, "--night", str(extract), "--url", url]
    command += ["--state", str(folder / "state"), "--plan", str(folder / "plan.jsonl")]
    command += ["--night-in-flight", str(in_flight)]
    if dry_run_memory is not None:
        command += ["--night-dry-run", dry_run_memory]
    before = all_requests(url)
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the night failed ({' '.join(command)}): exit {done.returncode}")
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    figures["all_requests"] = all_requests(url) - before
    return figures


# -- the matrix ---------------------------------------------------------------------------------


@dataclass
class Night:
    latency: float
    in_flight: int
    night: int
    figures: dict[str, Any]
    #: The ``max_memory`` of a dry run of the night, or ``None`` for the night itself.
    dry_run: str | None = None

    @property
    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = self.figures["summary"]
        return summary

    @property
    def seconds(self) -> float:
        seconds: float = self.figures["seconds"]
        return seconds


def run_nights(
    script: str,
    emulator_args: tuple[str, ...],
    extracts: list[Path],
    latencies: list[float],
    in_flights: list[int],
    folder: Path,
    show: Callable[[Night], str],
    dry_run: tuple[int, str] | None = None,
    after: Callable[[str, int], None] | None = None,
) -> list[Night]:
    """Every (latency, in-flight) of the matrix: a fresh emulator (``script`` serving with
    ``emulator_args``), the latency added to its every request, then one night per extract, each
    in a process of its own (``script --night``), their sync state kept across them; each night
    printed as ``show`` makes it as soon as it is done. ``dry_run`` (night number, ``max_memory``):
    that night is first run as a dry run with that memory limit. ``after(url, number)`` is called
    after each night, the emulator still serving."""
    nights = []
    for latency in latencies:
        for in_flight in in_flights:
            run = folder / f"run-{latency}-{in_flight}"
            run.mkdir()
            with ChildEmulator(script, *emulator_args) as url:
                add_latency(url, latency)
                for number, extract in enumerate(extracts, start=1):
                    if dry_run is not None and dry_run[0] == number:
                        figures = run_night(url, extract, run, in_flight, script, dry_run[1])
                        nights.append(Night(latency, in_flight, number, figures, dry_run[1]))
                        print(show(nights[-1]), flush=True)
                    figures = run_night(url, extract, run, in_flight, script)
                    nights.append(Night(latency, in_flight, number, figures))
                    print(show(nights[-1]), flush=True)
                    if after is not None:
                        after(url, number)
    return nights


def run_matrix(
    crm: Crm,
    latencies: list[float],
    in_flights: list[int],
    folder: Path,
    dry_run_memory: str | None,
    after: Callable[[str, int], None] | None = None,
) -> tuple[list[Night], list[int]]:
    """The matrix of :func:`run_nights` on ``crm``'s extracts, written to ``folder``
    (``night1.csv``, ``night2.csv``); the nights and the minimum write requests of each."""
    domains = folder / "domains.txt"
    domains.write_text("\n".join(crm.domains), encoding="utf-8")
    extracts = [folder / "night1.csv", folder / "night2.csv"]
    write_extract(crm.first_night, extracts[0])
    write_extract(crm.second_night, extracts[1])
    minimum = minimum_writes(crm)
    nights = run_nights(
        __file__,
        ("--domains", str(domains)),
        [extracts[0], extracts[1], extracts[1]],
        latencies,
        in_flights,
        folder,
        lambda night: row(night, minimum),
        (2, dry_run_memory) if dry_run_memory else None,
        after,
    )
    return nights, minimum


HEADER = (
    "| latency | in-flight | night | wall s | peak RSS MiB | guard's estimate MiB (÷ peak) "
    "| write requests (min) | all requests "
    "| added / updated / deleted / unchanged | rejected | failed | drift | unconfirmed | steps s |"
)
RULE = "|" + "---|" * (HEADER.count(" | ") + 1)


def row(night: Night, minimum: list[int]) -> str:
    s, steps = night.summary, night.figures["steps"]
    timed = ", ".join(f"{name} {value:.1f}" for name, value in steps.items())
    label = f"{night.night} dry run, max_memory {night.dry_run}" if night.dry_run else f"{night.night}"
    return (
        f"| {night.latency * 1000:g} ms | {night.in_flight} | {label} | {night.seconds:.1f} "
        f"| {night.figures['rss']:,.0f} | {night.figures['estimate']:,.0f} "
        f"({night.figures['estimate'] / night.figures['rss']:.2f}) "
        f"| {s['requests']['total']:,} ({minimum[night.night - 1]:,}) "
        f"| {night.figures['all_requests']:,} | {s['added']:,} / {s['updated']:,} / {s['deleted']:,} / "
        f"{s['unchanged']:,} | {s['rejected']:,} | {s['failed']:,} | {s['drift']:,} "
        f"| {s.get('unconfirmed', 0):,} | {timed} |"
    )


def latency_ratios(nights: list[Night], latency: float) -> list[str]:
    """Per in-flight value, each night's wall time at ``latency`` over the same night's at 0 s
    (aim: nights 1 and 2 <= 2x when more than one request is in flight); and how much faster
    than one request at a time each in-flight value ran nights 1 and 2 at ``latency``."""
    lines = []
    by = {(n.latency, n.in_flight, n.night): n for n in nights if not n.dry_run}
    for in_flight in sorted({n.in_flight for n in nights}):
        ratios = []
        for number in (1, 2, 3):
            far, near = by.get((latency, in_flight, number)), by.get((0.0, in_flight, number))
            if far is not None and near is not None:
                ratios.append((number, far.seconds / near.seconds))
        if ratios and latency > 0:
            text = ", ".join(f"night {number} {ratio:.2f}x" for number, ratio in ratios)
            aim = ""
            if in_flight > 1:
                met = all(ratio <= 2 for number, ratio in ratios if number in (1, 2))
                aim = f" (aim: nights 1 and 2 <= 2x: {'met' if met else 'NOT met'})"
            elif in_flight == 1:
                aim = " (one request at a time: the baseline)"
            lines.append(f"in-flight {in_flight}: wall at {latency * 1000:g} ms / wall at 0 ms: {text}{aim}")
    for in_flight in sorted({n.in_flight for n in nights} - {1}):
        for number in (1, 2):
            mine, base = by.get((latency, in_flight, number)), by.get((latency, 1, number))
            if mine is not None and base is not None:
                lines.append(
                    f"night {number} at {latency * 1000:g} ms: in-flight 1 {base.seconds:.1f} s, in-flight "
                    f"{in_flight} {mine.seconds:.1f} s ({base.seconds / mine.seconds:.1f}x faster)"
                )
    return lines


def report(crm: Crm, nights: list[Night], minimum: list[int], latency: float, people: int) -> list[str]:
    """The lines after the table: ratios, aims, and what looks wrong."""
    lines = latency_ratios(nights, latency)
    if people >= 1_000_000:
        for n in nights:
            if n.latency == latency and n.night == 2 and not n.dry_run:
                lines.append(
                    f"aim at 1,000,000: night 2 at {latency * 1000:g} ms, in-flight {n.in_flight}, <= 180 s: "
                    f"{'met' if n.seconds <= 180 else 'NOT met'} ({n.seconds:.1f} s)"
                )
        largest = max(n.figures["rss"] for n in nights)
        lines.append(
            "aim at 1,000,000: every night <= 1 GB of peak RSS: "
            f"{'met' if largest <= ONE_GB_MIB else 'NOT met'} (largest {largest:,.0f} MiB)"
        )
    bad = [sum(p.bad for p in people) for people in (crm.first_night, crm.second_night, crm.second_night)]
    for n in nights:
        s = n.summary
        odd = []
        if s["rejected"] != bad[n.night - 1]:
            odd.append(f"rejected {s['rejected']} against {bad[n.night - 1]} bad rows")
        for count in ("failed", "drift", "unconfirmed", "conflicts", "duplicates", "not_found"):
            if s.get(count):
                odd.append(f"{count} {s[count]}")
        if n.night == 3 and s["requests"]["total"]:
            odd.append(f"night 3 sent {s['requests']['total']} write requests")
        if s["requests"]["total"] > 1.1 * minimum[n.night - 1] + 1:
            odd.append(
                f"write requests {s['requests']} against a minimum of {minimum[n.night - 1]} "
                f"(planned {s.get('planned')})"
            )
        if n.figures["rss"] > ONE_GB_MIB:
            peaks = ", ".join(f"{step} {mib:,.0f}" for step, mib in n.figures.get("peaks", {}).items())
            odd.append(f"peak RSS over 1 GB; the peak (MiB) at the end of each step: {peaks}")
        if odd:
            reasons = {**s.get("failure_reasons", {})}
            lines.append(
                f"odd: {n.latency * 1000:g} ms, in-flight {n.in_flight}, night {n.night}: {'; '.join(odd)}"
                + (f"; failure reasons {reasons}" if reasons else "")
                + (f"; drift {s['drift_reasons'][:3]}" if s.get("drift_reasons") else "")
                + (f"; warnings {n.figures['warnings'][:3]}" if n.figures["warnings"] else "")
            )
    return lines


def describe(crm: Crm) -> str:
    sizes: dict[int, int] = {}
    for p in crm.first_night:
        sizes[p.account] = sizes.get(p.account, 0) + 1
    ordered = sorted(sizes.values())
    people = len(crm.first_night)
    with_email = sum(bool(p.email) for p in crm.first_night)
    phone_only = sum(bool(p.phone) and not p.email for p in crm.first_night)
    after = {(p.account, p.first, p.last) for p in crm.second_night}
    in_source = {p.account for p in crm.second_night if not p.bad}
    removed = [p for p in crm.first_night if (p.account, p.first, p.last) not in after and not p.bad]
    kept = sum(p.account not in in_source for p in removed)
    return (
        f"CRM-like data (seed {SEED}): {people:,} people on {len(crm.domains):,} accounts (median "
        f"{ordered[len(ordered) // 2]}, 99th percentile {ordered[len(ordered) * 99 // 100]}, largest "
        f"{ordered[-1]}); {with_email / people:.0%} with an e-mail, {phone_only / people:.0%} with a "
        f"phone and no e-mail, the rest a name alone; {sum(p.bad for p in crm.first_night):,} bad rows "
        f"on night 1, {sum(p.bad for p in crm.second_night):,} on nights 2 and 3; night 2: "
        f"{len(crm.second_night):,} rows (5% removed, 5% retitled, 10% new); of the {len(removed):,} "
        f"good people removed, {kept:,} were on accounts no longer in the extract, which mirror mode "
        "with delete_scope accounts_in_source leaves alone (they stay in the List)"
    )


def machine() -> str:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    return (
        f"{os.cpu_count()} cores / {memory:.0f} GiB, {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}; emulator in a child process, a fresh one per run of three nights; "
        f"each night in a process of its own; load average at the end {os.getloadavg()[0]:.1f}"
    )


def utc_now() -> str:
    try:
        return subprocess.run(
            ["date", "-u", "+%Y-%m-%d %H:%M UTC"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--people", type=int, default=100_000, help="people on night 1 (default 100,000)")
    parser.add_argument(
        "--latency", type=float, default=0.05, help="seconds added to each request (default 0.05; 0 runs too)"
    )
    parser.add_argument(
        "--in-flight", default="1,4", help="the client's max_in_flight values, comma-separated (default 1,4)"
    )
    parser.add_argument(
        "--dry-run-memory",
        metavar="SIZE",
        help="run night 2 first as a dry run with max_memory SIZE (e.g. 2GiB): the guard must let it through",
    )
    parser.add_argument("--append-results", action="store_true", help="append a section to RESULTS.md")
    parser.add_argument(SERVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--domains", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--night", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    parser.add_argument("--night-in-flight", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--night-dry-run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_emulator:
        serve_emulator(args.domains)
        return
    if args.night:
        night(args.url, args.night, args.state, args.plan, args.night_in_flight, args.night_dry_run)
        return
    command = shlex.join([".venv/bin/python", "benchmarks/people_job.py", *sys.argv[1:]])
    in_flights = [int(value) for value in args.in_flight.split(",")]
    latencies = sorted({0.0, args.latency})
    started = time.perf_counter()
    crm = Crm.make(args.people)
    print(describe(crm), f"(made in {time.perf_counter() - started:.1f} s)", flush=True)
    print(HEADER)
    print(RULE)
    with tempfile.TemporaryDirectory() as folder:
        nights, minimum = run_matrix(crm, latencies, in_flights, Path(folder), args.dry_run_memory)
    lines = report(crm, nights, minimum, args.latency, args.people)
    for line in lines:
        print(line)
    if args.append_results:
        table = [HEADER, RULE, *(row(n, minimum) for n in nights)]
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(
                f"\n## People job at network distance, {args.people:,} CRM-like people "
                f"(benchmarks/people_job.py), {utc_now()}\n\n"
                f"Machine: {machine()}. Command: `{command}`.\n\n"
                f"- {describe(crm)}\n"
                "- each night: the whole `sync_people` (mirror, accounts in source, max_delete_fraction 0.2, "
                "plan file, state kept across the nights, max_memory auto); write requests (the minimum "
                "the caps allow), every /v1 request the emulator received; steps timed in the night's "
                "process (read List runs beside read + prepare; other is what no step covers)\n\n"
                + "\n".join(table)
                + "\n\n"
                + "".join(f"- {line}\n" for line in lines)
            )


if __name__ == "__main__":
    main()
