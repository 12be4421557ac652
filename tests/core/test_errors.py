"""core.errors.first_line: the one rule for what a status, the CLI and a log show of an error."""

import pytest

from core.errors import MAX_LINE_CHARS, InvalidJobGroup, error_line, first_line
from core.jobgroup import parse_jobgroup


def test_first_line_is_the_first_non_empty_line_stripped():
    assert first_line("\n  \n  boom: no such topic  \nat line 2\n") == "boom: no such topic"
    assert first_line("") == ""


def test_a_long_line_is_cut_and_marked_only_when_asked():
    long = "x" * (MAX_LINE_CHARS + 5)
    assert first_line(long) == "x" * MAX_LINE_CHARS
    assert first_line(long, mark_cut=True) == "x" * MAX_LINE_CHARS + "..."
    exact = "y" * MAX_LINE_CHARS
    assert first_line(exact, mark_cut=True) == exact


def test_a_malformed_jobgroup_says_its_parse_error_on_one_marked_line():
    unknown_field = "q" * (MAX_LINE_CHARS + 100)
    with pytest.raises(InvalidJobGroup) as raised:
        parse_jobgroup('{"jobGroupId": "x", "' + unknown_field + '": 1}')
    message = str(raised.value)
    assert "not a valid JobGroup JSON: Message type" in message
    assert message.endswith("q...")
    assert len(message.splitlines()) == 1


def test_an_error_line_names_the_type_and_the_first_line():
    assert error_line(ValueError("\nbad value\n  at frame 1")) == "ValueError: bad value"
