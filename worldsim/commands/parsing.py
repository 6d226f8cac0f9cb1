"""From a command's argv to its config: tyro with worldsim's conventions.

Every command is a function of one dataclass (a library config such as
:class:`~worldsim.training.bc.BCConfig`, or the command's own arguments); the dataclass's
fields are the command's settings and their docstrings its help. The conventions, applied here
so that library configs stay plain dataclasses:

- **flags and a config file**: the fields a config names in its ``COMMAND_LINE`` (with those its
  bases name; every field when none does) are flags, at most 25 a command; every setting,
  flags included, can come from a TOML or JSON file, ``--config-file run.toml``, whose tables
  are the config's nested parts (``[rl]``, ``[model.frames]``); flags given beside a file win.
  ``--print-config`` prints the settings a command line resolves to, as such a file, and runs
  nothing. One flag style: ``--kebab-case``, a nested part's flags without its name;
- a task list (fields named in :data:`REPEATED`) takes one task per flag, the flag repeated:
  ``--task PushCube-v0 --task StackCube-v0``;
- a config chosen by a flag (:class:`Choice`, train-rl's ``--algo``) is parsed as the chosen
  dataclass, and an option only another choice has is named as such;
- a nested part of a config named in :data:`FLAT` (such as ``imagination``, an
  :class:`~worldsim.envs.imagination.ImaginationConfig`) shows its command-line fields under their
  own names (``--world-model``), grouped under its name in ``--help``; other parts (co-evolution's
  ``rl`` and ``wm``) are a config file's tables only; fields of a part that the command sets itself
  (the config's ``SET_BY_COMMAND``, e.g. the world model co-evolution trains) are neither;
- a rung of the imagination ladder (:class:`~worldsim.envs.imagination.Rung`) is given by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import os
import re
import sys
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro
from tyro.constructors import (
    ConstructorRegistry,
    PrimitiveConstructorSpec,
    PrimitiveTypeInfo,
    StructConstructorSpec,
    StructTypeInfo,
)

from worldsim.envs.imagination import RUNGS, Rung
from worldsim.runtime.config_files import config_toml, read_config_file, unchecked_instance
from worldsim.runtime.settings import RunSettings

REPEATED = frozenset({"task", "seen_tasks", "unseen_tasks"})
"""Task-list fields (typed ``tuple[str, ...]``): one task per flag, repeated. A single ``task``
(train-rl, coevolve) stays one value."""

FLAT = frozenset({"imagination", "look"})
"""Fields holding a nested config part whose flags keep the part's own field names."""
MAX_FLAGS = 25
"""The most options a command's ``--help`` lists; the rest are a config file's."""
CONFIG_FILE, PRINT_CONFIG = "--config-file", "--print-config"
FILE_NOTE = ("Every setting, those below and those only a file takes, can come from a TOML or JSON file: "
             "--config-file FILE (flags given beside it win); --print-config prints the settings a command line "
             "resolves to, as such a file, and runs nothing.")

_registry = ConstructorRegistry()
_deferring = False
_hidden: dict[type, frozenset[str]] = {}  # per dataclass of the parsed command: its fields that are not flags


def _strip(tp: Any) -> Any:
    """``tp`` without ``Annotated`` metadata."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def nested_parts(cls: type) -> dict[str, tuple[type, frozenset[str]]]:
    """The :data:`FLAT` parts of dataclass ``cls``: field name -> (the part's dataclass, the names
    of its fields that ``cls`` sets itself, ``cls.SET_BY_COMMAND``)."""
    hints, hidden = typing.get_type_hints(cls), set_by_command(cls)
    parts = {f.name: _strip(hints[f.name]) for f in dataclasses.fields(cls) if f.name in FLAT}
    return {name: (parts[name], hidden.get(parts[name], frozenset())) for name in parts
            if dataclasses.is_dataclass(parts[name])}


def set_by_command(cls: type) -> dict[type, frozenset[str]]:
    """Per nested part's dataclass: the fields that ``cls`` sets itself (``cls.SET_BY_COMMAND``),
    which are neither flags nor a config file's."""
    hints = typing.get_type_hints(cls)
    return {_strip(hints[name]): frozenset(names) for name, names in getattr(cls, "SET_BY_COMMAND", {}).items()
            if dataclasses.is_dataclass(_strip(hints[name]))}


def command_line(cls: type) -> frozenset[str] | None:
    """The fields of dataclass ``cls`` that are flags: those its classes name in ``COMMAND_LINE``
    (None when none does: all of them)."""
    declared = [vars(k)["COMMAND_LINE"] for k in cls.__mro__ if "COMMAND_LINE" in vars(k)]
    return frozenset(name for names in declared for name in names) if declared else None


def hidden_fields(cls: type) -> dict[type, frozenset[str]]:
    """Per dataclass of the command (``cls`` and its :data:`FLAT` parts): the fields that are not
    flags: set by the command, off its command line, or a part that is not :data:`FLAT`."""
    fixed = set_by_command(cls)
    hidden: dict[type, frozenset[str]] = {}
    for part in (cls, *(part for part, _ in nested_parts(cls).values())):
        shown, hints = command_line(part), typing.get_type_hints(part)
        hidden[part] = fixed.get(part, frozenset()) | {
            f.name for f in dataclasses.fields(part)
            if (shown is not None and f.name not in shown)
            or (f.name not in FLAT and is_part(_strip(hints[f.name])))}
    return hidden


def is_part(tp: Any) -> bool:
    """Whether a field of type ``tp`` is a nested config part (a dataclass not given by name, as a
    rung is)."""
    return dataclasses.is_dataclass(tp) and not hasattr(tp, "from_json")


@_registry.struct_rule
def _repeated_task_lists(info: StructTypeInfo) -> StructConstructorSpec | None:
    """tyro's own spec of a dataclass, with :data:`REPEATED` fields marked to append."""
    global _deferring
    if _deferring or not is_part(info.type):
        return None
    _deferring = True  # this rule answers None while tyro's default rules build the spec
    try:
        spec = ConstructorRegistry.get_struct_spec(info)
    finally:
        _deferring = False
    if not isinstance(spec, StructConstructorSpec):
        return None
    hidden = _hidden.get(info.type, frozenset())
    fields: list[Any] = []
    for f in spec.fields:
        if f.name in REPEATED and typing.get_origin(f.type) is tuple:
            f = dataclasses.replace(f, type=Annotated[f.type, tyro.conf.UseAppendAction])  # type: ignore[arg-type]  # tyro takes Annotated field types
        elif f.name in FLAT and dataclasses.is_dataclass(_strip(f.type)):
            f = dataclasses.replace(f, type=Annotated[f.type, tyro.conf.OmitArgPrefixes])  # type: ignore[arg-type]
        elif f.name in hidden:
            f = dataclasses.replace(f, type=Annotated[f.type, tyro.conf.Suppress])  # type: ignore[arg-type]
        fields.append(f)
    # a trainer's run settings (worldsim.runtime.run.RunSettings, its base class) come last in --help
    if isinstance(info.type, type) and issubclass(info.type, RunSettings):
        shared = {f.name for f in dataclasses.fields(RunSettings)}
        fields.sort(key=lambda f: f.name in shared)
    return StructConstructorSpec(instantiate=spec.instantiate, fields=tuple(fields))


@_registry.primitive_rule
def _rung_by_name(info: PrimitiveTypeInfo) -> PrimitiveConstructorSpec | None:
    """A :class:`~worldsim.envs.imagination.Rung` is given by its name."""
    if info.type is not Rung:
        return None
    return PrimitiveConstructorSpec(nargs=1, metavar="{" + ",".join(RUNGS) + "}", choices=tuple(RUNGS),
                                    instance_from_str=lambda args: RUNGS[args[0]],
                                    is_instance=lambda value: isinstance(value, Rung),
                                    str_from_instance=lambda rung: [rung.name])


@dataclass(frozen=True)
class Choice:
    """Marks a command argument whose dataclass is chosen by one flag, e.g.
    ``Annotated[PPOConfig | GRPOConfig, Choice("--algo", "algorithm", {"ppo": PPOConfig, "grpo": ...})]``:
    the first choice is the default, and the chosen dataclass's fields are the flags."""

    flag: str
    what: str
    choices: dict[str, type]

    def select(self, args: list[str]) -> tuple[str, list[str]]:
        """The chosen name and ``args`` without the flag; ``ValueError`` for an unknown name."""
        name, rest, k = next(iter(self.choices)), [], 0
        while k < len(args):
            arg = args[k]
            if arg == self.flag and k + 1 < len(args):
                name, k = args[k + 1], k + 2
                continue
            if arg.startswith(self.flag + "="):
                name = arg.split("=", 1)[1]
            else:
                rest.append(arg)
            k += 1
        if name not in self.choices:
            raise ValueError(f"{self.flag} {name!r} is not a choice; allowed: {', '.join(self.choices)}")
        return name, rest

    def check_options(self, name: str, args: list[str]) -> None:
        """``ValueError`` naming an option of another choice that ``name`` lacks."""
        own = _flags(self.choices[name])
        for other, cls in self.choices.items():
            for flag in sorted(_flags(cls) - own):
                if any(arg == flag or arg.startswith(flag + "=") for arg in args):
                    raise ValueError(f"{flag} is not an option of {name}; leave it out or use "
                                     f"{self.flag} {other}")

    def describe(self, name: str) -> str:
        others = [c for c in self.choices if c != name]
        return (f"{self.flag} {{{','.join(self.choices)}}} chooses the {self.what} (default: "
                f"{next(iter(self.choices))}); these are the options of {name}; "
                f"`{self.flag} {others[0]} --help` lists those of {others[0]}.")


def _flags(cls: type) -> set[str]:
    """The flags of a command's dataclass (those of its :data:`FLAT` parts included, hidden fields
    left out), ``--no-x`` included for booleans."""
    hidden, flags = hidden_fields(cls), set()
    for part in hidden:
        for f in dataclasses.fields(part):
            if f.name not in hidden[part] and f.name not in FLAT:
                flag = "--" + f.name.replace("_", "-")
                flags |= {flag, "--no-" + flag[2:]}
    return flags


def config_type(command: Callable[..., Any]) -> Any:
    """The annotated type of a command function's one parameter."""
    hints = typing.get_type_hints(command, include_extras=True)
    params = [name for name in hints if name != "return"]
    if len(params) != 1:
        raise TypeError(f"command {command.__name__} must take one dataclass argument; it takes {params}")
    return hints[params[0]]


def parse(command: Callable[..., Any], args: list[str], prog: str) -> Any:
    """The config of ``command`` from ``args``. Whatever refuses a value, tyro (an unknown flag, a
    value it cannot convert) or the config's own checks, the result is a ``ValueError`` whose
    message is one line (:class:`UsageError` for tyro's, its box made :func:`one_line`);
    ``--help`` still exits with ``SystemExit(0)``."""
    target = config_type(command)
    description = inspect.getdoc(command) or ""
    args, file = _option(args, CONFIG_FILE)
    printing = PRINT_CONFIG in args
    args = [arg for arg in args if arg != PRINT_CONFIG]
    choice = next((m for m in getattr(target, "__metadata__", ()) if isinstance(m, Choice)), None)
    if choice is not None:
        name, args = choice.select(args)
        choice.check_options(name, args)
        target = choice.choices[name]
        description = f"{description.rstrip()}\n\n{choice.describe(name)}"
    global _hidden
    _hidden = hidden_fields(target)
    default = _from_file(target, Path(file)) if file is not None else None
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), _unwrapped(not {"-h", "--help"} & set(args)):
            config = tyro.cli(target, args=args, prog=prog, description=f"{description.rstrip()}\n\n{FILE_NOTE}",
                              registry=_registry, default=default)
    except SystemExit as exit:
        if exit.code not in (0, None):
            raise UsageError(one_line(captured.getvalue(), prog)) from None
        sys.stderr.write(captured.getvalue())
        raise
    sys.stderr.write(captured.getvalue())
    if printing:
        print(config_toml(config, set_by_command(target)), end="")
        raise SystemExit(0)
    return config


def default_settings(target: Any) -> str:
    """A command's settings at their defaults as a config file's TOML (the first choice's, for a
    command with a :class:`Choice`); a required setting is written as a comment."""
    choice = next((m for m in getattr(target, "__metadata__", ()) if isinstance(m, Choice)), None)
    cls = next(iter(choice.choices.values())) if choice is not None else _strip(target)
    return config_toml(unchecked_instance(cls, {}, "defaults", REQUIRED), set_by_command(cls))


class _Required:
    """A setting the command line must give (its default in :func:`default_settings`)."""

    def to_json(self) -> str:
        return "(required)"


REQUIRED = _Required()


def _option(args: list[str], flag: str) -> tuple[list[str], str | None]:
    """``args`` without option ``flag`` and its value, and the value (None when not given)."""
    rest, value, k = [], None, 0
    while k < len(args):
        if args[k] == flag:
            if k + 1 >= len(args):
                raise ValueError(f"{flag} needs a file")
            value, k = args[k + 1], k + 2
            continue
        if args[k].startswith(flag + "="):
            value = args[k].split("=", 1)[1]
        else:
            rest.append(args[k])
        k += 1
    return rest, value


def _from_file(target: type, path: Path) -> Any:
    """The command's defaults with the settings of the config file ``path`` (unchecked: the command
    line completes it first); ``ValueError`` naming a setting the command sets itself."""
    mapping = read_config_file(path)
    for field, names in getattr(target, "SET_BY_COMMAND", {}).items():
        table = mapping.get(field, {})
        taken = sorted(set(table) & set(names)) if isinstance(table, dict) else []
        if taken:
            raise ValueError(f"config file {str(path)!r}: {field}.{taken[0]} is set by the command itself")
    return unchecked_instance(target, mapping, f"config file {str(path)!r}", tyro.MISSING)


@contextlib.contextmanager
def _unwrapped(wide: bool) -> Iterator[None]:
    """With ``wide``, a terminal too wide for tyro to wrap a message (``COLUMNS``), so that one
    message stays one line; ``--help`` keeps the real width."""
    before = os.environ.get("COLUMNS")
    if wide:
        os.environ["COLUMNS"] = "100000"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


class UsageError(ValueError):
    """A value or flag tyro refused; the CLI prints it as its one line ``error: ...``."""


def one_line(box: str, prog: str) -> str:
    """tyro's boxed error (drawn with box characters, or plain where stdout is not UTF-8) as one
    line: its messages, without the argument's help text and the pointer to ``--help`` (named
    once at the end)."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", box).splitlines()
    if any(line.lstrip().startswith("╭") for line in lines):
        title = next(line.strip().strip("╭╮─ ") for line in lines if line.lstrip().startswith("╭"))
        body = [line.strip()[2:-1].rstrip() for line in lines if line.lstrip().startswith("│")]
    else:  # " title", " -----", then the contents indented by two
        title = lines[0].strip() if lines else ""
        body = [line[2:].rstrip() for line in lines[2:]]
    sections: list[list[str]] = [[]]
    for line in body:
        if line.strip() and set(line.strip()) <= {"─", "-"}:
            sections.append([])
        elif line.strip():
            sections[-1].append(line)
    parts = []
    for section in sections:
        if not section or section[0].startswith(("Argument helptext", "For full helptext")):
            continue
        kept = [text.strip() for text in section if len(text) - len(text.lstrip()) < 8]  # help text: indented more
        parts.append(" ".join(kept))
    message = "; ".join(parts) or title or "bad arguments"
    message = re.sub(r"^Error parsing (\w+: )?", "", message)
    if message.startswith("Missing from") or message.startswith("Unrecognized"):
        message = message[0].lower() + message[1:]
    return f"{' '.join(message.split())} (`{prog} --help` lists the options)"
