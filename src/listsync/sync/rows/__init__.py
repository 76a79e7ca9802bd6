"""Upsert of warehouse rows into a List: changed cells only.

The service has no row upsert, so one is built from its four row operations. :func:`upsert_rows`
runs the whole flow (the operator and the ``listsync upsert-rows`` command call it), one module a
step: :mod:`~listsync.sync.rows.read` reads the List (into :mod:`~listsync.sync.rows.list_rows`),
:mod:`~listsync.sync.rows.diff` plans (a :mod:`~listsync.sync.rows.plan`),
:mod:`~listsync.sync.rows.apply` writes, :mod:`~listsync.sync.rows.verify` reads back, and
:mod:`~listsync.sync.rows.upsert` runs them in the order every List sync follows
(:mod:`listsync.sync.job`)::

    prepared = prepare_rows(frames, column_map, key_column, rejects=rejects)  # columns, one row per key
    current, reads = read_list_rows(client, table_id, key_column, ...)       # GET rows, paged, as columns
    plan = plan_rows_upsert(prepared.frame, current, key_column=...)         # a join on the key: no I/O
    write_json_lines(plan_entries(plan), plan_path)                           # for review
    check_delete_safety(...)                        # a broken extract never wipes a List
    outcome = apply_rows_plan(plan, client, table_id)   # POST rows, PATCH cells, DELETE rows

A row is identified by the value of its ``key_column`` cell. The plan holds:

- additions: keys that are not in the List, sent as POST rows (cells that are null are left out);
- changes: one cell update per cell whose value differs, sent as PATCH cells chunked across rows;
- removals: rows whose key is not in the extract, only with ``delete_missing=True``;
- duplicate keys: keys held by more than one row of the List. Those rows are reported and left
  alone (which of them is "the" row would be a guess); extract rows with such a key are counted
  as failed, so a person removes the duplicates.

Values compare canonically (:func:`cell_values_equal`): numbers by value (``10 == 10.0``), strings
exactly, booleans only to booleans, dates and timestamps as ISO 8601 (``prepare_rows`` turns them
into ISO strings; a ``date``/``datetime`` given directly matches any ISO form of itself), objects
and arrays element by element with the same rules, i.e. as canonical JSON. The List side is always
a cell's ``value``, never its ``computedValue``. A null in the extract leaves the List's cell
alone unless ``overwrite_with_null=True``.

Row adds are not idempotent: when a POST rows chunk fails in a way that may have reached the
server (timeout, dropped connection, 5xx), :func:`apply_rows_plan` re-reads that chunk's keys
(GET rows with ``operator=eq``) and re-sends only the rows still absent, so a retry never creates
a duplicate row.
"""

from listsync.sync.rows.apply import (
    ADD_ROWS,
    DELETE_ROWS,
    GET_ROWS,
    UPDATE_CELLS,
    ApplyOutcome,
    apply_rows_plan,
    chunk_sizes,
)
from listsync.sync.rows.cells import cell_values_equal, to_cell_value
from listsync.sync.rows.diff import plan_rows_upsert
from listsync.sync.rows.list_rows import CurrentRow, ListRows
from listsync.sync.rows.plan import CellChange, DuplicateKey, RowAddition, RowRemoval, RowsPlan, plan_entries
from listsync.sync.rows.read import list_key_normalizer, read_current_rows, read_list_rows
from listsync.sync.rows.upsert import upsert_rows
from listsync.sync.rows.verify import RowsVerification, verify_rows

__all__ = [
    "ADD_ROWS",
    "DELETE_ROWS",
    "GET_ROWS",
    "UPDATE_CELLS",
    "ApplyOutcome",
    "CellChange",
    "CurrentRow",
    "DuplicateKey",
    "ListRows",
    "RowAddition",
    "RowRemoval",
    "RowsPlan",
    "RowsVerification",
    "apply_rows_plan",
    "cell_values_equal",
    "chunk_sizes",
    "list_key_normalizer",
    "plan_entries",
    "plan_rows_upsert",
    "read_current_rows",
    "read_list_rows",
    "to_cell_value",
    "upsert_rows",
    "verify_rows",
]
