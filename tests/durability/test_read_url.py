"""The ``read_url`` parameter of a PostgreSQL store URL: taken apart, checked, and its password
hidden wherever a URL is shown (it sits percent-encoded inside the store URL)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.durability.factory import describe_store, open_durability, redact

STANDBY = "postgresql://app:s3cret@standby:5433/app?sslmode=require"
PRIMARY = "postgresql://app:pw@primary:5432/app?schema=ik"


def test_read_url_is_a_separate_driver_url_kept_out_of_repr() -> None:
    location = describe_store(f"{PRIMARY}&read_url={quote(STANDBY, safe='')}")
    assert location.read_dsn == STANDBY
    assert dict(location.options) == {"schema": "ik"}
    assert location.dsn == "postgresql://app:pw@primary:5432/app"
    assert "s3cret" not in repr(location) and "pw" not in repr(location)


def test_an_unencoded_read_url_without_parameters_reads_the_same() -> None:
    plain = "postgresql://app@standby/app"
    assert describe_store(f"{PRIMARY}&read_url={plain}").read_dsn == plain


@pytest.mark.parametrize(
    "read",
    [
        "mysql://standby/app",
        "standby:5432",
        "postgresql://standby:99999/app",
        "postgresql://standby/app?schema=other",
        "postgresql://standby/app?statement_timeout=5",
    ],
)
def test_a_bad_read_url_is_refused_by_name(read: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        describe_store(f"{PRIMARY}&read_url={quote(read, safe='')}")
    assert caught.value.context["setting"] == "read_url"


def test_redact_hides_the_password_of_an_encoded_read_url() -> None:
    url = f"{PRIMARY}&read_url={quote(STANDBY + '&password=other', safe='')}"
    shown = redact(url)
    assert "s3cret" not in shown and "other" not in shown and ":pw@" not in shown
    assert "standby%3A5433" in shown  # the host stays readable
    assert redact(f"?read_url={STANDBY}") == f"?read_url={STANDBY.replace('s3cret', '***')}"


async def test_read_given_twice_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        await open_durability(
            f"{PRIMARY}&read_url={quote(STANDBY, safe='')}", read="postgresql://other/app"
        )
    assert caught.value.context["setting"] == "read"


async def test_a_read_target_that_is_no_postgresql_url_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        await open_durability("postgresql://app@127.0.0.1:1/app", read="sqlite:///x.db")
    assert caught.value.context["setting"] == "read"
