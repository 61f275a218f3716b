"""Webhook signatures follow Standard Webhooks: an off-the-shelf verifier accepts them, the id,
timestamp and body are all signed, the tolerance is checked, and the guide's receiver example
dedupes on the signed id."""

from __future__ import annotations

import base64
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook, WebhookVerificationError

from intention_kernel.contracts import ConfigurationError
from intention_kernel.relay.signing import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    new_secret,
    sign,
    signature_headers,
    verify_headers,
    verify_signature,
)

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
BODY = b'{"id":"evt_1","type":"booking.created","data":{"amount":10}}'
NOW = 1_800_000_000
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "relay.md"


def test_headers_are_the_standard_ones_and_a_standard_verifier_accepts_them() -> None:
    headers = signature_headers(SECRET, "evt_1", BODY)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER) == (
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    )
    assert re.fullmatch(r"v1,[A-Za-z0-9+/]+=*", headers["webhook-signature"])
    assert Webhook(SECRET).verify(BODY, headers) == {
        "id": "evt_1",
        "type": "booking.created",
        "data": {"amount": 10},
    }


def test_sign_matches_the_reference_implementation() -> None:
    moment = datetime.fromtimestamp(NOW, tz=UTC)
    expected = Webhook(SECRET).sign("evt_1", moment, BODY.decode())
    assert sign(SECRET, "evt_1", str(NOW), BODY) == expected


@pytest.mark.parametrize(
    "change",
    [
        {"webhook-id": "evt_2"},  # a replay under another id
        {"webhook-timestamp": str(NOW + 1)},
        {"body": BODY.replace(b"10", b"99")},
    ],
)
def test_the_id_timestamp_and_body_are_all_signed(change: dict[str, Any]) -> None:
    headers = signature_headers(SECRET, "evt_1", BODY, now=NOW)
    body = change.pop("body", BODY)
    headers = {**headers, **change}
    assert not verify_signature(
        SECRET,
        msg_id=headers["webhook-id"],
        timestamp=headers["webhook-timestamp"],
        body=body,
        signature=headers["webhook-signature"],
        now=NOW,
    )


def _verify(signature: str, timestamp: str = str(NOW), **options: Any) -> bool:
    return verify_signature(
        options.pop("secret", SECRET),
        msg_id="evt_1",
        timestamp=timestamp,
        body=BODY,
        signature=signature,
        now=options.pop("now", NOW),
        **options,
    )


def test_verify_checks_secret_age_rotation_and_never_raises_on_bad_headers() -> None:
    good = sign(SECRET, "evt_1", str(NOW), BODY)
    assert _verify(good)
    assert _verify(good, now=NOW + 300) and _verify(good, now=NOW - 300)
    assert not _verify(good, now=NOW + 301) and not _verify(good, now=NOW - 301)
    assert _verify(good, now=NOW + 500, tolerance=600)
    assert not _verify(good, secret=new_secret())
    rotated = f"{sign(new_secret(), 'evt_1', str(NOW), BODY)} {good}"
    assert _verify(rotated)
    for bad in ("", "v1", "v1,", "v1,???", "v2," + good[3:], good.replace("v1,", "v1="), "x y z"):
        assert not _verify(bad)
    for stamp in ("", "nan", "inf", "-inf", "1e9", f"{NOW}.5", "-1", "soon", " " + str(NOW)):
        assert not _verify(good, timestamp=stamp)


@pytest.mark.parametrize("tolerance", [math.nan, math.inf, -math.inf, 0, -1, "300", True])
def test_a_bad_tolerance_is_refused(tolerance: Any) -> None:
    good = sign(SECRET, "evt_1", str(NOW), BODY)
    with pytest.raises(ConfigurationError) as caught:
        _verify(good, tolerance=tolerance)
    assert caught.value.context == {"setting": "tolerance"}


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_!!!", "not-a-standard-secret"])
def test_a_bad_secret_is_refused(secret: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        sign(secret, "evt_1", str(NOW), BODY)
    assert caught.value.context == {"setting": "secret"}
    assert len(secret) < 7 or secret not in str(caught.value.to_json())


def test_new_secrets_are_standard_and_distinct() -> None:
    secrets = {new_secret() for _ in range(5)}
    assert len(secrets) == 5
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
        Webhook(secret)  # the reference implementation takes it


def _guide_receiver() -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    [receiver] = [b for b in blocks if "def receive(" in b]
    return receiver


def test_the_guide_receiver_verifies_and_dedupes_on_the_signed_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IK_WEBHOOK_SECRET", SECRET)
    handled: list[dict[str, Any]] = []
    namespace: dict[str, Any] = {"__name__": "guide", "handle": handled.append}
    exec(compile(_guide_receiver(), "docs/relay.md", "exec"), namespace)
    receive = namespace["receive"]
    headers = signature_headers(SECRET, "evt_1", BODY)
    assert receive(headers, BODY) == 204
    assert receive(headers, BODY) == 200  # a redelivery or a replay: acknowledged, not handled
    assert receive({**headers, "webhook-id": "evt_other"}, BODY) == 401  # the id is signed
    assert receive({**headers, "webhook-timestamp": "1"}, BODY) == 401  # too old
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(BODY, {**headers, "webhook-id": "evt_other"})
    assert [event["id"] for event in handled] == ["evt_1"]


_HEADER_TEXT = (
    st.text(max_size=64)
    | st.integers(min_value=20, max_value=5000).map(lambda n: "9" * n)
    | st.builds(lambda pad, n: "0" * pad + str(n), st.integers(0, 5000), st.integers(0, 10**12))
)


@settings(max_examples=200, deadline=None)
@given(
    msg_id=_HEADER_TEXT,
    timestamp=_HEADER_TEXT | st.integers(min_value=-(10**30), max_value=10**30).map(str),
    signature=_HEADER_TEXT,
    names=st.sampled_from([str.lower, str.upper, str.title]),
)
def test_hostile_header_values_are_a_failed_verification_never_an_exception(
    msg_id: str, timestamp: str, signature: str, names: Any
) -> None:
    """Any header value a client can send (4,301 digits, surrogates, NUL, signs) is ``False``."""
    headers = {
        names(ID_HEADER): msg_id,
        names(TIMESTAMP_HEADER): timestamp,
        names(SIGNATURE_HEADER): signature,
    }
    assert verify_headers(SECRET, headers, BODY, now=NOW) is False
    assert (
        verify_signature(
            SECRET, msg_id=msg_id, timestamp=timestamp, body=BODY, signature=signature, now=NOW
        )
        is False
    )


def test_a_timestamp_of_thousands_of_digits_does_not_verify() -> None:
    good = sign(SECRET, "evt_1", str(NOW), BODY)
    for stamp in ("9" * 4301, "0" * 5000 + str(NOW), "1" * 100_000):
        assert not _verify(good, timestamp=stamp)
