"""MkDocs hooks: the API pages' source tree, and the command-line page generated from the CLI.

- The API pages (mkdocstrings) read source files. ``envs/``, ``world_models/``, ``policies/`` and
  ``assets/`` install as subpackages of ``worldsim`` (pyproject's ``package-dir``), so the
  hook lays out ``build/api_source/worldsim`` with links, as the installed package is laid out.
- ``docs/cli.md`` holds the marker :data:`CLI_MARKER`; the hook replaces it with every command's
  ``--help``, rendered by :func:`worldsim.commands.cli.main` from :data:`~worldsim.commands.cli.COMMANDS`
  at build time, and every setting it takes as a config file (``--print-config`` of its defaults),
  so the page cannot drift from the flags.
- :data:`LADDER_MARKER` (``docs/imagination.md``) becomes the imagination ladder's table, generated
  from the rungs themselves (:func:`worldsim.envs.imagination.ladder_table`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
API_SOURCE = ROOT / "build" / "api_source"
SUBPACKAGES = ("envs", "world_models", "policies", "assets")
"""Top-level folders installed as ``worldsim.<name>``."""
CLI_MARKER = "<!-- worldsim-cli -->"
LADDER_MARKER = "<!-- worldsim-ladder -->"
EXTRA_HELP = {"train-rl": (["--algo", "grpo"],)}
"""Commands whose options depend on a choice: their help is rendered once more per choice."""


def on_startup(command: str, dirty: bool) -> None:
    """Lay out ``build/api_source/worldsim`` before mkdocstrings looks for it."""
    package = API_SOURCE / "worldsim"
    shutil.rmtree(API_SOURCE, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (ROOT / "worldsim").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        (package / name).symlink_to(ROOT / name)


def command_help(args: list[str]) -> str:
    """What ``worldsim <args> --help`` prints, at 100 columns; an error if it does not exit 0."""
    from worldsim.commands.cli import main

    os.environ["COLUMNS"] = "100"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--help"])
    if code != 0:
        raise RuntimeError(f"`worldsim {' '.join(args)} --help` exited with {code}: {err.getvalue()}")
    return "\n".join(line.rstrip() for line in out.getvalue().strip().splitlines())


def cli_reference() -> str:
    """Every command's ``--help`` (its summary first), in the order of ``worldsim --help``."""
    from worldsim.commands.cli import COMMANDS, STAGES

    sections = []
    for module, title in STAGES.items():
        sections += [f"## {title[0].upper()}{title[1:]}", ""]
        for name, command in COMMANDS.items():
            if command.module != module:
                continue
            sections += [f"### `worldsim {name}`", "", "```text", command_help([name]), "```"]
            for extra in EXTRA_HELP.get(name, ()):
                sections += ["", f"With `{' '.join(extra)}`:", "", "```text", command_help([name, *extra]), "```"]
            sections += ["", "Every setting as a config file holds it, at its defaults (`--config-file`):", "",
                         "```toml", settings_file(name).rstrip(), "```", ""]
    return "\n".join(sections)


def settings_file(name: str) -> str:
    """Every setting of command ``name`` as the TOML a config file holds, at its defaults (a
    required setting as a comment)."""
    from worldsim.commands.cli import load
    from worldsim.commands.parsing import config_type, default_settings

    return default_settings(config_type(load(name)))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the command-line page's and the ladder's markers with what they are generated from."""
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if LADDER_MARKER in markdown:
        from worldsim.envs.imagination import ladder_table

        markdown = markdown.replace(LADDER_MARKER, ladder_table())
    return markdown
