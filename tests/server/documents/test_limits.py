"""Characters per text and per request: refused before any work (``service/limits.py``)."""

from __future__ import annotations

import pytest

from attnserve.server.service.limits import check_texts
from attnserve.server.shared.config import Settings
from attnserve.server.shared.config_sources import resolve_settings
from attnserve.server.shared.errors import InvalidRequest, LimitExceeded


def test_a_text_over_the_character_limit_is_refused():
    settings = Settings(max_text_chars=10, max_request_chars=25)
    check_texts(settings, ["0123456789", "0123456789"])
    with pytest.raises(LimitExceeded, match="text 1 is 11 characters; this server takes at most 10 per text"):
        check_texts(settings, ["x", "0123456789a"])
    with pytest.raises(LimitExceeded, match="30 characters together; this server takes at most 25 per request"):
        check_texts(settings, ["0123456789"] * 3)


def test_a_megabyte_text_is_refused_by_the_defaults():
    with pytest.raises(InvalidRequest, match="1,048,576 characters"):
        check_texts(Settings(), ["x" * (1 << 20)])


def test_character_limits_are_settings():
    s = resolve_settings(environ={"ATTNSERVE_MAX_TEXT_CHARS": "1000"}, max_request_chars=5000)
    assert (s.max_text_chars, s.max_request_chars) == (1000, 5000)
    with pytest.raises(ValueError, match="max_text_chars"):
        resolve_settings(environ={}, max_text_chars=0)
