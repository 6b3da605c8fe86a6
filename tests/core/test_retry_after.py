"""Reading an HTTP ``Retry-After`` (``kubesage.core.retry_after``)."""

from __future__ import annotations

import pytest

from kubesage.core.retry_after import retry_after_s

NOW = 1_445_412_470.0  # 2015-10-21 07:27:50 UTC


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 10.0),  # an HTTP-date, 10 s from NOW
        ("Wed, 21 Oct 2015 07:00:00 GMT", 0.0),  # already past: ask again now
        ("Wed Oct 21 07:28:00 2015", 10.0),  # asctime's form, GMT
        ("Wednesday, 21-Oct-15 07:28:00 GMT", 10.0),  # RFC 850's
        (None, None),
        ("", None),
        ("-3", None),
        ("1.5", None),  # delay-seconds is a whole number
        ("soon", None),
    ],
)
def test_delay_seconds_or_an_http_date(header: str | None, expected: float | None) -> None:
    assert retry_after_s(header, now_s=NOW) == expected
