"""Turns from the brokers a team already runs (NATS JetStream, Redis Streams): each message a
broker delivers becomes an inbox submission (``docs/ingress.md``).

The message's id is the turn id, the message is acknowledged only once its submission is
durable, and a redelivery is harmless (the submit is idempotent on the ids). A thread's messages
go to one partition (``partition_of``) and each partition is submitted one message at a time,
in order, so a thread's turns commit in the order they were published.
"""

from typing import TYPE_CHECKING, Any

from ._message import MAX_MESSAGE_BYTES, TurnMessage, decode_turn, encode_turn, partition_of
from ._stats import IngressStats

if TYPE_CHECKING:
    from ._nats import NatsIngress
    from ._redis import RedisIngress

__all__ = [
    "MAX_MESSAGE_BYTES",
    "IngressStats",
    "NatsIngress",
    "RedisIngress",
    "TurnMessage",
    "decode_turn",
    "encode_turn",
    "partition_of",
]


def __getattr__(name: str) -> Any:
    """``NatsIngress`` loads ``nats-py`` (the ``nats`` extra) and ``RedisIngress`` ``redis``
    (the ``redis`` extra) only when it is used."""
    if name == "NatsIngress":
        from ._nats import NatsIngress

        return NatsIngress
    if name == "RedisIngress":
        from ._redis import RedisIngress

        return RedisIngress
    raise AttributeError(name)
