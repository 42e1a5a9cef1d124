"""``--help`` of every installed command and subcommand prints its usage and exits 0.

argparse formats each help string with ``%``, so a help text that says "30% more" without
doubling the sign crashed ``attnserve-server --help`` with a ValueError.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points

import pytest

SCRIPTS = {ep.name: ep for ep in entry_points(group="console_scripts") if ep.name.startswith("attnserve-")}


def run_help(script: str, argv: list[str], capsys) -> str:
    """The command's help text; the command must exit 0 (by SystemExit or by returning)."""
    main = SCRIPTS[script].load()
    try:
        code = main([*argv, "--help"])
    except SystemExit as exit_info:
        code = exit_info.code
    out = capsys.readouterr().out
    assert code in (0, None), out
    return out


def test_every_command_is_installed():
    assert {"attnserve-server", "attnserve-client", "attnserve-export", "attnserve-train", "attnserve-bench"} <= set(
        SCRIPTS
    )


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_of_every_command_and_subcommand(script, capsys):
    out = run_help(script, [], capsys)
    assert out.startswith("usage:")
    # subcommands as argparse lists them: "{a,b,c}"
    choices = re.search(r"^usage: \S+ .*?\{([\w,-]+)\}", out, re.S)
    for sub in choices.group(1).split(",") if choices else []:
        assert run_help(script, [sub], capsys).startswith("usage:"), sub


def test_server_help_lists_every_setting(capsys):
    from dataclasses import fields

    from attnserve.server.shared.config import Settings
    from attnserve.server.shared.config_sources import _flag

    out = run_help("attnserve-server", [], capsys)
    assert "12-30% more tokens/s" in " ".join(out.split())  # the help text that used to crash it
    missing = [f.name for f in fields(Settings) if _flag(f.name) not in out]
    assert not missing
