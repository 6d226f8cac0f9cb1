"""The ``worldsim`` command line: ``worldsim <command> [options]`` (``worldsim --help``).

Each command is a function of one dataclass in a module of this package, grouped by stage;
:data:`COMMANDS` says where, so that ``worldsim --help`` lists them without importing any (or
torch). A command's module is imported when it runs; its flags come from its dataclass
(:mod:`worldsim.commands.parsing`).

A command that fails on bad input (a missing file, an unknown task, a value out of range)
prints one line, ``error: ...``, and exits with code 2; a folder the command created for its
outputs is removed again if nothing was written into it. Other exceptions are bugs and keep
their traceback.
"""

from __future__ import annotations

import difflib
import importlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXPECTED_ERRORS: tuple[type[BaseException], ...] = (FileNotFoundError, FileExistsError, IsADirectoryError,
                                                     NotADirectoryError, ValueError, KeyError, TypeError)
"""What the library raises for bad input; these end in one line and exit code 2."""


@dataclass(frozen=True)
class Command:
    """Where a command lives: ``worldsim.commands.<module>.<function>``, and its one-line summary
    (the first line of the function's docstring) for ``worldsim --help``."""

    module: str
    function: str
    summary: str


COMMANDS: dict[str, Command] = {
    "list-envs": Command("envs", "list_envs",
                         "Print the registered tasks and the suites with their splits."),
    "render": Command("envs", "render",
                      "Roll out the scripted expert on tasks and save the episodes as a video."),
    "collect": Command("data", "collect",
                       "Record episodes of a policy to an HDF5 episode file."),
    "dataset-info": Command("data", "dataset_info",
                            "Summarise an episode file: layout, and episodes and success per task."),
    "export": Command("data", "export",
                      "Write an episode file as a dataset in another format (LeRobot v3.0 or v2.1)."),
    "import": Command("data", "import_",
                      "Read a dataset of another format (LeRobot) into a worldsim episode file."),
    "train-bc": Command("train", "train_bc",
                        "Train TinyVLA by behaviour cloning on recorded episodes."),
    "train-rl": Command("train", "train_rl",
                        "Train a policy with PPO or GRPO, in physics or in a world model."),
    "evaluate": Command("evaluate", "evaluate",
                        "Roll a policy out on tasks: success rates with 95% intervals."),
    "rank-policies": Command("evaluate", "rank_policies",
                             "Rank policies by imagined success and compare with their real success."),
    "imagined-vs-real": Command("evaluate", "imagined_vs_real",
                                "Run a policy from the same real starts in a world model and in physics; "
                                "compare the outcomes."),
    "train-wm": Command("world_model", "train_wm",
                        "Train a world model on recorded episodes, or fine-tune one."),
    "eval-wm": Command("world_model", "eval_wm",
                       "Measure a world model's fidelity on held-out episodes."),
    "imagine": Command("world_model", "imagine",
                       "Imagine episodes from real starts, saved beside the recorded ones."),
    "record-features": Command("failure", "record_features",
                               "Record a policy's features and sampled chunks on recorded episodes, to fit "
                               "detectors without its rollouts."),
    "foresight": Command("failure", "foresight",
                         "Add the world model's foresight to recorded rollouts, for the foresight detector."),
    "detect": Command("failure", "detect",
                      "Evaluate failure detectors on recorded rollouts (SAFE protocol)."),
    "coevolve": Command("pipelines", "coevolve", "Co-evolve a policy and a world model: RL in imagination, "
                                                 "real data refines the model."),
    "quickstart": Command("pipelines", "quickstart",
                          "The whole pipeline, small, on CPU, with one report."),
}

STAGES = {"envs": "environments", "data": "data", "train": "training", "evaluate": "evaluation",
          "world_model": "world models", "failure": "failure detection", "pipelines": "pipelines"}


def usage() -> str:
    """``worldsim --help``: the commands by stage, with their summaries."""
    width = max(map(len, COMMANDS)) + 2
    lines = ["usage: worldsim [-h] COMMAND [OPTIONS]", "",
             "worldsim: robot-learning environments, world models, policies and failure detectors."]
    for module, title in STAGES.items():
        lines += ["", f"{title}:"]
        lines += [f"  {name:<{width}}{c.summary}" for name, c in COMMANDS.items() if c.module == module]
    lines += ["", "`worldsim COMMAND --help` lists the options of a command."]
    return "\n".join(lines)


def load(name: str) -> Any:
    """The function of command ``name`` (importing its module)."""
    command = COMMANDS[name]
    return getattr(importlib.import_module(f"worldsim.commands.{command.module}"), command.function)


def main(argv: list[str] | None = None) -> int:
    """Run ``worldsim`` with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    try:
        code = _run(sys.argv[1:] if argv is None else list(argv))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`worldsim --help | head`): stop quietly, as a killed pipe writer
        # would, and keep the interpreter's final flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


def _run(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        if not args:
            print("error: name a command", file=sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"error: unknown command {name!r}{hint}; `worldsim --help` lists them", file=sys.stderr)
        return 2
    from worldsim.commands.parsing import parse

    command = load(name)
    try:
        config = parse(command, rest, prog=f"worldsim {name}")
        created = _missing_folder(getattr(config, "out", None))
        try:
            command(config)
        except BaseException:
            _remove_if_empty(created)
            raise
    except SystemExit as exit:  # tyro's --help and usage errors
        return exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except EXPECTED_ERRORS as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
        return 2
    return 0


def _missing_folder(out: Any) -> Path | None:
    """The outermost folder on the way to ``out`` that does not exist yet (what a command that
    writes ``out`` creates), or None."""
    if out is None:
        return None
    missing = None
    for path in (Path(out), *Path(out).parents):
        if path.exists():
            break
        missing = path
    return missing


def _remove_if_empty(folder: Path | None) -> None:
    """Remove ``folder`` if the command created it and left no file in it."""
    if folder is not None and folder.is_dir() and not any(p.is_file() for p in folder.rglob("*")):
        shutil.rmtree(folder)


if __name__ == "__main__":
    sys.exit(main())
