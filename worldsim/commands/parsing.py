"""From a command's argv to its config: tyro with worldsim's conventions, and old flag names.

Every command is a function of one dataclass (a library config such as
:class:`~worldsim.training.bc.BCConfig`, or the command's own arguments); the dataclass's
fields are the command's flags and their docstrings its help. The conventions, applied here
so that library configs stay plain dataclasses:

- a task list (fields named in :data:`REPEATED`) takes one task per flag, the flag repeated:
  ``--task PushCube-v0 --task StackCube-v0``;
- a config chosen by a flag (:class:`Choice`, train-rl's ``--algo``) is parsed as the chosen
  dataclass, and an option only another choice has is named as such;
- flags renamed in this release still work, with a one-line notice on stderr
  (:data:`RENAMED`).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import tyro
from tyro.constructors import ConstructorRegistry, StructConstructorSpec, StructTypeInfo

REPEATED = frozenset({"task", "seen_tasks", "unseen_tasks"})
"""Task-list fields (typed ``tuple[str, ...]``): one task per flag, repeated. A single ``task``
(train-rl, coevolve) stays one value."""

RENAMED: dict[str, dict[str, str]] = {
    "detect": {"--rollouts": "--data"},
    "evaluate": {"--json": "--out"},
}
"""Per command, old flag -> new flag. The old names are accepted for one release."""

SPLIT_LISTS: dict[str, frozenset[str]] = {"rank-policies": frozenset({"--task"})}
"""Per command, flags that took several values at once (``--task A B``) and now repeat."""

_registry = ConstructorRegistry()
_deferring = False


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
    fields = tuple(dataclasses.replace(f, type=Annotated[f.type, tyro.conf.UseAppendAction])  # type: ignore[arg-type]  # tyro takes Annotated field types
                   if f.name in REPEATED and typing.get_origin(f.type) is tuple else f for f in spec.fields)
    return StructConstructorSpec(instantiate=spec.instantiate, fields=fields)


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
    """The flags of a dataclass's fields, ``--no-x`` included for booleans."""
    flags = set()
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        flags |= {flag, "--no-" + flag[2:]}
    return flags


def renamed(command: str, args: list[str]) -> list[str]:
    """``args`` with the old names of renamed flags replaced, and values given as one list split
    into repeated flags; a one-line notice on stderr for each old form used."""
    renames, split = RENAMED.get(command, {}), SPLIT_LISTS.get(command, frozenset())
    out: list[str] = []
    k = 0
    while k < len(args):
        arg = args[k]
        flag, eq, value = arg.partition("=")
        if flag in renames:
            print(f"{flag} is deprecated; use {renames[flag]}", file=sys.stderr)
            arg = renames[flag] + eq + value
            flag = renames[flag]
        out.append(arg)
        k += 1
        if flag in split and not eq:
            values = []
            while k < len(args) and not args[k].startswith("-"):
                values.append(args[k])
                k += 1
            out += values[:1]
            for extra in values[1:]:
                out += [flag, extra]
            if len(values) > 1:
                print(f"{flag} {' '.join(values)} is deprecated; repeat {flag} for each value",
                      file=sys.stderr)
    return out


def config_type(command: Callable[..., Any]) -> Any:
    """The annotated type of a command function's one parameter."""
    hints = typing.get_type_hints(command, include_extras=True)
    params = [name for name in hints if name != "return"]
    if len(params) != 1:
        raise TypeError(f"command {command.__name__} must take one dataclass argument; it takes {params}")
    return hints[params[0]]


def parse(command: Callable[..., Any], args: list[str], prog: str) -> Any:
    """The config of ``command`` from ``args`` (tyro's usage message and exit code 2 on a bad
    argument; ``ValueError`` from the config's own checks)."""
    target = config_type(command)
    description = inspect.getdoc(command) or ""
    choice = next((m for m in getattr(target, "__metadata__", ()) if isinstance(m, Choice)), None)
    if choice is not None:
        name, args = choice.select(args)
        choice.check_options(name, args)
        target = choice.choices[name]
        description = f"{description.rstrip()}\n\n{choice.describe(name)}"
    return tyro.cli(target, args=args, prog=prog, description=description, registry=_registry)
