"""Why a thread is blocked or waiting, each reason with its fix, in plain words.

Why in plain words: a stuck thread is found by an operator under pressure; a held lease, a
pending confirmation, an uncertain write and an incompatible checkpoint look alike from outside,
and each has a different remedy. Each remedy is a command line that runs as printed
(``store_arg`` is the ``--store`` part, or empty), with any password hidden.

Why an uncertain write does not block the thread: the next turn runs and answers; only a turn
that calls that write's key again fails closed. So such a finding names the key it holds
(``Finding.key``), and the thread itself is blocked only by a held lease or an incompatible
checkpoint.

Why submitted turns are named: workers run a thread's requests one at a time in submission
order, so the thread's earliest open request (its head) holds the later ones back when its claim
expired or it waits for a retry or a ``not_before`` time; a ``dead`` request earlier than open
ones was skipped. Each is named with the ``inbox`` command (or the worker) that resolves it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.durability import DurabilityStore
from ..contracts.errors import CheckpointIncompatibleError
from ..contracts.inspect import LeaseInfo, StoreInspector
from ..contracts.receipts import ReceiptStatus
from ..durability.factory import redact
from ..kernel import Compatibility, admit_checkpoint
from ._age import span
from ._inbox import DEAD_SHOWN, InboxFacts, inbox_facts, until

__all__ = ["Diagnosis", "Finding", "diagnose_thread", "redact"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason the thread is blocked (``blocking``), a write held (``key``: the write's
    idempotency key, which fails closed until reconciled) or a wait, and how to resolve it."""

    kind: str
    blocking: bool
    detail: str
    resolve: str
    key: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "blocking": self.blocking,
            "key": self.key,
            "detail": self.detail,
            "resolve": self.resolve,
        }


@dataclass(frozen=True, slots=True)
class Diagnosis:
    thread_id: str
    revision: int | None
    lease: LeaseInfo
    findings: list[Finding] = field(default_factory=list)
    inbox: InboxFacts | None = None
    """The thread's submitted turn requests (``None`` for a store without an inbox)."""

    @property
    def blocked(self) -> bool:
        return any(f.blocking for f in self.findings)

    @property
    def waiting(self) -> bool:
        """Blocked, or waiting on the user (the CLI's exit code 1)."""
        return self.blocked or any(f.kind == "pending_interaction" for f in self.findings)

    @property
    def blocked_keys(self) -> list[str]:
        """The writes held until an operator reconciles them (the thread itself goes on)."""
        return [f.key for f in self.findings if f.key is not None]


def _finding(
    kind: str, blocking: bool, detail: str, resolve: str, key: str | None = None
) -> Finding:
    # A holder's command line or a stored text may carry a password as well.
    return Finding(kind, blocking, redact(detail), redact(resolve), key)


async def diagnose_thread(
    store: DurabilityStore,
    inspector: StoreInspector,
    thread_id: str,
    checkpoint: KernelCheckpoint | None,
    *,
    compat: Compatibility | None = None,
    store_arg: str = "",
) -> Diagnosis:
    """The findings for ``thread_id`` whose head is ``checkpoint`` (already loaded)."""
    q = shlex.quote
    findings: list[Finding] = []
    lease = await inspector.lease_info(thread_id)
    receipts = await store.list_receipts(thread_id=thread_id, limit=1000)
    undelivered: list[int] = []
    dead: list[int] = []
    after = 0
    while True:
        page = await store.read_outbox(thread_id=thread_id, after_position=after)
        for stored in page:
            if stored.dead:
                dead.append(stored.position)
            elif stored.delivered_at is None:
                undelivered.append(stored.position)
        if len(page) < 1000:
            break
        after = page[-1].position
    if lease.held:
        who = lease.holder or "another process"
        since = f" since {lease.since.isoformat()}" if lease.since else ""
        expires = (
            f"expires at {lease.expires_at.isoformat()}"
            if lease.expires_at
            else "it has no deadline: it is released when the holder finishes or exits"
        )
        findings.append(
            _finding(
                "lease_held",
                True,
                f"the thread's lease is held by {who}{since} (epoch {lease.epoch}); {expires}."
                " A turn is running now, or its process hangs.",
                "wait for the running turn; if the holder hangs, stop that process"
                + (f" (kill {who.split()[1]})" if who.startswith("pid ") else ""),
            )
        )
    inbox = await inbox_facts(store, thread_id)
    if inbox is not None:
        findings.extend(_inbox_findings(inbox, thread_id, store_arg))
    for r in receipts:
        base = f"intention-kernel reconcile {q(thread_id)} {q(r.idempotency_key)}"
        resolve = (
            f"check the provider, then: {base} --completed --value JSON"
            f" --note TEXT --actor NAME{store_arg}  (or --not-applied)"
        )
        if r.status is ReceiptStatus.UNCERTAIN:
            findings.append(
                _finding(
                    "uncertain_receipt",
                    False,
                    f"the write {r.idempotency_key} ({r.capability_id}, turn {r.turn_id})"
                    " may or may not have happened; a turn that calls this key again fails"
                    " closed until it is reconciled (other turns run).",
                    resolve,
                    r.idempotency_key,
                )
            )
        elif r.status is ReceiptStatus.PREPARED and not lease.held:
            # No turn runs it: the turn ended before recording the outcome (interrupted).
            findings.append(
                _finding(
                    "prepared_receipt",
                    False,
                    f"the write {r.idempotency_key} ({r.capability_id}, turn {r.turn_id})"
                    " was interrupted: its turn ended before recording the outcome, so it"
                    " may or may not have happened; a turn that calls this key again fails"
                    " closed until it is reconciled (other turns run).",
                    resolve,
                    r.idempotency_key,
                )
            )
    if checkpoint is not None and checkpoint.interaction is not None:
        i = checkpoint.interaction
        findings.append(
            _finding(
                "pending_interaction",
                False,
                f"waiting on a {i.kind} from turn {i.turn_id}: {i.prompt!r}"
                + (f" (agenda item {i.agenda_item_id})" if i.agenda_item_id else ""),
                "the user answers it in the next turn of this thread",
            )
        )
    if checkpoint is not None and compat is not None:
        try:
            admit_checkpoint(checkpoint, compat)
        except CheckpointIncompatibleError as exc:
            findings.append(
                _finding(
                    "incompatible_checkpoint",
                    True,
                    f"{exc.message} (stored fingerprint {checkpoint.agent_fingerprint},"
                    f" schema {checkpoint.schema_version})",
                    "compile the agent with compatible_with=["
                    f"{checkpoint.agent_fingerprint!r}] or register a migration from it",
                )
            )
    if dead:
        findings.append(
            _finding(
                "dead_events",
                False,
                f"{len(dead)} outbox event(s) were given up after repeated failures"
                f" (positions {dead[:10]}); later events of this thread wait behind them.",
                f"fix the sink, then: intention-kernel outbox requeue{store_arg}"
                f" --thread-id {q(thread_id)}",
            )
        )
    if undelivered:
        findings.append(
            _finding(
                "undelivered_events",
                False,
                f"{len(undelivered)} outbox event(s) are not delivered yet.",
                f"run a relay: intention-kernel outbox relay{store_arg} --sink URL",
            )
        )
    return Diagnosis(
        thread_id, None if checkpoint is None else checkpoint.revision, lease, findings, inbox
    )


def _inbox_findings(inbox: InboxFacts, thread_id: str, store_arg: str) -> list[Finding]:
    """The head request that holds the thread back, and the dead requests it went on without."""
    q = shlex.quote
    findings: list[Finding] = []
    head = inbox.head
    behind = inbox.pending + inbox.running - 1
    later = f" The thread's {behind} later request(s) wait behind it." if behind > 0 else ""

    def command(action: str, turn_id: str) -> str:
        return (
            f"intention-kernel inbox {action} --thread {q(thread_id)} --turn {q(turn_id)}"
            f" --actor NAME --note TEXT{store_arg}"
        )

    if head is not None and inbox.claim_expired:
        assert head.claimed_until is not None
        expired = span((inbox.now - head.claimed_until).total_seconds())
        findings.append(
            _finding(
                "request_claim_expired",
                True,
                f"the submitted turn {head.turn_id} (request {head.position}, attempt"
                f" {head.attempts}) was claimed by {head.claimed_by or 'a worker'}, whose claim"
                f" expired {expired} ago: that worker stopped or hangs. A worker claims it"
                f" again and runs the turn again from the thread's last commit.{later}",
                "run a worker on this store: intention-kernel worker --agent MODULE:ATTRIBUTE"
                f"{store_arg}",
            )
        )
    elif head is not None and inbox.waiting:
        if head.attempts > 0:
            failed = f" [{head.error_code}] {head.error}" if head.error_code else ""
            when = until(head.not_before, inbox.now)
            retried = "it is due for its retry" if when == "due" else f"it is retried {when}"
            why = f"failed {head.attempts} time(s){failed}; {retried}"
        else:
            why = f"was submitted to run not before {head.not_before.isoformat()}"
        future = head.not_before > inbox.now
        run_it = (
            f"run it now: {command('retry', head.turn_id)}"
            if future
            else "it is due: a running worker claims it (intention-kernel worker --agent"
            f" MODULE:ATTRIBUTE{store_arg})"
        )
        findings.append(
            _finding(
                "request_waiting",
                # It holds the thread while it waits for a time; a due one waits for a worker.
                future and (head.attempts > 0 or behind > 0),
                f"the submitted turn {head.turn_id} (request {head.position}) {why}.{later}",
                f"{run_it}; or give it up (later requests go on):"
                f" {command('cancel', head.turn_id)}",
            )
        )
    for dead in inbox.dead_before[:DEAD_SHOWN]:
        failed = f" [{dead.error_code}] {dead.error}" if dead.error_code else ""
        by = [a for a in dead.operator_log if a.action == "cancel"]
        cancelled = f", cancelled by {by[-1].actor}: {by[-1].note}" if by else ""
        findings.append(
            _finding(
                "dead_request",
                False,
                f"the submitted turn {dead.turn_id} (request {dead.position}) is dead after"
                f" {dead.attempts} attempt(s){failed}{cancelled}; the thread's later requests"
                " run without it.",
                f"to run it before the thread's open requests: {command('retry', dead.turn_id)}",
            )
        )
    if len(inbox.dead_before) > DEAD_SHOWN:
        findings.append(
            _finding(
                "dead_request",
                False,
                f"{len(inbox.dead_before) - DEAD_SHOWN} more dead request(s) of this thread are"
                " earlier than its open ones.",
                f"intention-kernel inbox list --thread {q(thread_id)} --state dead{store_arg}",
            )
        )
    return findings
