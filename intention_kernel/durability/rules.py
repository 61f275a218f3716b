"""The pure rules an adapter applies inside its transactions, for adapter authors.

A storage role member (``storage.py``) reads what it needs, asks one of these functions
what to write, and writes exactly that. Being pure (no I/O, the clock passed in), each rule is
table-tested once and every store decides the same way.
"""

from ._documents import (
    PRUNED_TURN,
    decode_model,
    decode_turn,
    encode_model,
    head_problem,
    is_pruned,
    unreadable,
    unreadable_event,
    unreadable_receipt,
)
from ._ledger import EffectAction, EffectStart, needs_operator, resolve_uncertain, start_effect
from ._outbox_rules import Candidate, FailedAttempt, claimable, failed_attempt
from ._turns import already_committed, check_revision

__all__ = [
    "PRUNED_TURN",
    "Candidate",
    "EffectAction",
    "EffectStart",
    "FailedAttempt",
    "already_committed",
    "check_revision",
    "claimable",
    "decode_model",
    "decode_turn",
    "encode_model",
    "failed_attempt",
    "head_problem",
    "is_pruned",
    "needs_operator",
    "resolve_uncertain",
    "start_effect",
    "unreadable",
    "unreadable_event",
    "unreadable_receipt",
]
