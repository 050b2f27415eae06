"""The one-line forms of an error that warnings and drl's own errors quote."""

from __future__ import annotations

from drlcli.errors import error_line, first_line


def test_first_line_skips_blank_lines_and_keeps_one_line_short():
    assert first_line("\n  \n  disk full  \nat write()\n") == "disk full"
    assert first_line("x" * 1000) == "x" * 300
    assert first_line("", "OSError") == "OSError"
    assert first_line(" \n\t\n") == ""


def test_error_line_names_the_type_and_the_messages_first_line():
    assert error_line(OSError("No space left on device\nTraceback ...")) == (
        "OSError: No space left on device"
    )
    assert error_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert error_line(ValueError("\n")) == "ValueError"
