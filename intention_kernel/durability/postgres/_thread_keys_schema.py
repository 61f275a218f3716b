"""Migration 11 of the PostgreSQL store: a schema that can be distributed by thread.

Every primary key and unique constraint of a table of thread rows holds ``thread_id``, which
is what a database distributed by thread (Citus, docs/scale-out.md) requires. The keys keep
``position`` first, so lookups by position stay one probe.

A thread's outbox events are ordered by ``(revision, sequence)`` (``contracts.outbox``), not by
a position that writers on several nodes would number apart: existing events get their turn's
revision (every event's turn is kept). The order index replaces the one by thread and
position. Its predicate is the claim's ``_IN_THREAD`` (``_outbox_sql``): the statements that
probe by position do not imply it, and it does not imply the position index's, so with
statistics that show no pending rows the planner can take neither index for the other's work.
"""

from __future__ import annotations

__all__ = ["THREAD_KEYS_MIGRATION"]

THREAD_KEYS_MIGRATION = """
    ALTER TABLE {s}.outbox ADD COLUMN revision bigint NOT NULL DEFAULT 0;
    UPDATE {s}.outbox o SET revision = t.revision
      FROM {s}.turns t WHERE t.thread_id = o.thread_id AND t.turn_id = o.turn_id;
    ALTER TABLE {s}.outbox ALTER COLUMN revision DROP DEFAULT,
        DROP CONSTRAINT outbox_pkey, ADD CONSTRAINT outbox_pkey PRIMARY KEY (position, thread_id);
    DROP INDEX {s}.outbox_open_by_thread;
    CREATE INDEX outbox_open_in_thread ON {s}.outbox (thread_id, revision, sequence)
        WHERE (delivered_at IS NULL) IS TRUE AND revision >= 0;
    ALTER TABLE {s}.reconciliations DROP CONSTRAINT reconciliations_pkey,
        ADD CONSTRAINT reconciliations_pkey PRIMARY KEY (position, thread_id);
    ALTER TABLE {s}.inbox DROP CONSTRAINT inbox_pkey,
        ADD CONSTRAINT inbox_pkey PRIMARY KEY (position, thread_id);
    """
