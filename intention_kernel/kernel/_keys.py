"""Provider idempotency keys with an explicit namespace.

Why: the ledger key (``capability:business-key``) deduplicates within one thread. Many providers
(payment APIs, ticket systems) keep one idempotency namespace per account, shared by every
tenant and thread of the host. Two threads using the same business key would then collide at the
provider. ``provider_idempotency_key`` puts the namespace the host chooses (tenant, thread) into
the key, deterministically, so a retry sends exactly the same key and nothing else ever does.
"""

from __future__ import annotations

import hashlib
import json

from ..contracts.errors import ErrorCode, InvalidInputError
from ..contracts.receipts import EffectAuthority

__all__ = ["provider_idempotency_key"]


def provider_idempotency_key(
    authority: EffectAuthority,
    *,
    tenant: str,
    thread: str | None,
    prefix: str = "ik",
    max_length: int = 64,
) -> str:
    """``prefix-<sha256 hex>`` of ``[tenant, thread, authority.idempotency_key]``.

    ``thread=None`` means the business key is unique per tenant (the provider deduplicates a
    retry from another thread too); pass the thread id when keys are only unique per thread.
    The result is at most ``max_length`` characters (providers cap key length; 64 keeps
    128 bits of the hash at the default prefix) and uses only ``[A-Za-z0-9-]``.
    """
    if not isinstance(tenant, str) or not tenant.strip():
        raise InvalidInputError(
            "a provider key needs a non-blank tenant namespace",
            code=ErrorCode.INVALID_IDEMPOTENCY_KEY,
            context={"field": "tenant"},
        )
    if thread is not None and (not isinstance(thread, str) or not thread.strip()):
        raise InvalidInputError(
            "thread must be None or non-blank text",
            code=ErrorCode.INVALID_IDEMPOTENCY_KEY,
            context={"field": "thread"},
        )
    if not prefix.isalnum() or max_length < len(prefix) + 33:
        raise InvalidInputError(
            "prefix must be alphanumeric and max_length leave room for 32 hex digits",
            code=ErrorCode.INVALID_IDEMPOTENCY_KEY,
            context={"field": "prefix"},
        )
    material = json.dumps(
        [tenant, thread, authority.idempotency_key], ensure_ascii=False, separators=(",", ":")
    )
    digest = hashlib.sha256(material.encode("utf-8")).hexdigest()
    return f"{prefix}-{digest}"[:max_length]
