"""From a command's argv to its config: tyro with worldsim's conventions.

Every command is a function of one dataclass (a library config such as
:class:`~worldsim.training.bc.BCConfig`, or the command's own arguments); the dataclass's
fields are the command's flags and their docstrings its help. The conventions, applied here
so that library configs stay plain dataclasses:

- a task list (fields named in :data:`REPEATED`) takes one task per flag, the flag repeated:
  ``--task PushCube-v0 --task StackCube-v0``;
- a config chosen by a flag (:class:`Choice`, train-rl's ``--algo``) is parsed as the chosen
  dataclass, and an option only another choice has is named as such;
- a nested part of a config (a field named in :data:`FLAT`, such as ``imagination``, an
  :class:`~worldsim.envs.imagination.ImaginationConfig`) keeps its fields' own flag names
  (``--world-model``, not ``--imagination.world-model``), grouped under its name in ``--help``;
  fields of the part that the command sets itself (the config's ``SET_BY_COMMAND``, e.g. the
  world model co-evolution trains) are not flags.
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
from typing import Annotated, Any

import tyro
from tyro.constructors import ConstructorRegistry, StructConstructorSpec, StructTypeInfo

from worldsim.runtime.settings import RunSettings

REPEATED = frozenset({"task", "seen_tasks", "unseen_tasks"})
"""Task-list fields (typed ``tuple[str, ...]``): one task per flag, repeated. A single ``task``
(train-rl, coevolve) stays one value."""

FLAT = frozenset({"imagination", "guard", "model"})
"""Fields holding a nested config part whose flags keep the part's own field names."""

_registry = ConstructorRegistry()
_deferring = False
_hidden: dict[type, frozenset[str]] = {}  # per nested part's type: its fields the parsed command sets itself


def _strip(tp: Any) -> Any:
    """``tp`` without ``Annotated`` metadata."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def nested_parts(cls: type) -> dict[str, tuple[type, frozenset[str]]]:
    """The :data:`FLAT` parts of dataclass ``cls``: field name -> (the part's dataclass, the names
    of its fields that ``cls`` sets itself, ``cls.SET_BY_COMMAND``)."""
    hints, hidden = typing.get_type_hints(cls), hidden_fields(cls)
    parts = {f.name: _strip(hints[f.name]) for f in dataclasses.fields(cls) if f.name in FLAT}
    return {name: (parts[name], hidden.get(parts[name], frozenset())) for name in parts
            if dataclasses.is_dataclass(parts[name])}


def hidden_fields(cls: type) -> dict[type, frozenset[str]]:
    """Per nested part's dataclass: the fields that ``cls`` sets itself (``cls.SET_BY_COMMAND``,
    for a :data:`FLAT` part or a prefixed one alike), which are then not flags."""
    hints = typing.get_type_hints(cls)
    return {_strip(hints[name]): frozenset(names) for name, names in getattr(cls, "SET_BY_COMMAND", {}).items()
            if dataclasses.is_dataclass(_strip(hints[name]))}


@_registry.struct_rule
def _repeated_task_lists(info: StructTypeInfo) -> StructConstructorSpec | None:
    """tyro's own spec of a dataclass, with :data:`REPEATED` fields marked to append."""
    global _deferring
    if _deferring or not dataclasses.is_dataclass(info.type):
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


def _flags(cls: type, hidden: frozenset[str] = frozenset()) -> set[str]:
    """The flags of a dataclass's fields (those of its :data:`FLAT` parts included, ``hidden``
    fields left out), ``--no-x`` included for booleans."""
    flags = set()
    parts = nested_parts(cls)
    for f in dataclasses.fields(cls):
        if f.name in parts:
            flags |= _flags(*parts[f.name])
        elif f.name not in hidden:
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
    choice = next((m for m in getattr(target, "__metadata__", ()) if isinstance(m, Choice)), None)
    if choice is not None:
        name, args = choice.select(args)
        choice.check_options(name, args)
        target = choice.choices[name]
        description = f"{description.rstrip()}\n\n{choice.describe(name)}"
    global _hidden
    _hidden = hidden_fields(target)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), _unwrapped(not {"-h", "--help"} & set(args)):
            config = tyro.cli(target, args=args, prog=prog, description=description, registry=_registry)
    except SystemExit as exit:
        if exit.code not in (0, None):
            raise UsageError(one_line(captured.getvalue(), prog)) from None
        sys.stderr.write(captured.getvalue())
        raise
    sys.stderr.write(captured.getvalue())
    return config


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
