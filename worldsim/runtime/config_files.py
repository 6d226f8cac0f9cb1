"""Configs from mappings: a config file's tables, a saved model's ``config.json``, a preset.

Every worldsim config is a (nested) dataclass. :func:`build_dataclass` builds one from a mapping
of its field names (a nested part from a nested mapping), converting what JSON and TOML cannot
say (tuples, paths) and refusing, in one line naming the field, an unknown name or a value of
the wrong kind; the dataclass's own checks then run as usual. :func:`read_config_file` reads a
``.toml`` or ``.json`` file into such a mapping, and :func:`config_toml` writes a config back as
TOML (``worldsim <command> --print-config``). TOML has no null: a setting that may be None is
set to None by the string ``"None"``, as on the command line.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

FILE_SUFFIXES = (".toml", ".json")
NONE = "None"
"""How a config file sets a setting that may be None to None (TOML has no null)."""


class _Unset:
    """A field that neither the mapping nor a default gives."""


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def field_values(cls: type, mapping: dict[str, Any], where: str, base: Any = None, path: str = "") -> dict[str, Any]:
    """The keyword arguments that build ``cls`` from ``mapping`` over ``base`` (an instance whose
    values stand where the mapping is silent; None: the fields' own defaults), converted to the
    fields' types. ``ValueError`` naming ``where`` the mapping came from and the ``path`` to an
    unknown field (with the known ones) or to a value that does not fit its field."""
    if not isinstance(mapping, dict):
        raise ValueError(f"{where}: {path or 'the settings'} must be a table of {cls.__name__} settings, "
                         f"not {mapping!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(mapping) - set(fields))
    if unknown:
        inside = f" in [{path}]" if path else ""
        raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}{inside}; known: {', '.join(fields)}")
    hints, values = _hints(cls), {}
    for name, f in fields.items():
        current = getattr(base, name) if base is not None else _default(f)
        if name in mapping:
            values[name] = convert(hints[name], mapping[name], where, f"{path}.{name}" if path else name, current)
        elif current is not _Unset:
            values[name] = current
    return values


def build_dataclass(cls: type, mapping: dict[str, Any], where: str, base: Any = None, path: str = "") -> Any:
    """``cls`` built from ``mapping`` over ``base`` (see :func:`field_values`); its own checks run,
    and a ``ValueError`` of theirs is prefixed with ``where``."""
    values = field_values(cls, mapping, where, base, path)
    try:
        return cls(**values)
    except ValueError as err:
        if str(err).startswith(where):
            raise
        raise ValueError(f"{where}: {f'[{path}] ' if path else ''}{err}") from None


def unchecked_instance(cls: type, mapping: dict[str, Any], where: str, missing: Any) -> Any:
    """An instance of ``cls`` with ``mapping``'s values over the defaults, built without running its
    checks (a required field the mapping lacks holds ``missing``): the defaults a command line
    starts from, checked once the command line has filled it in. Nested parts are built and checked."""
    values = field_values(cls, mapping, where)
    instance: Any = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.init:
            object.__setattr__(instance, f.name, values.get(f.name, missing))
    return instance


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _Unset


def convert(tp: Any, value: Any, where: str, path: str, current: Any = None) -> Any:
    """``value`` (from JSON or TOML, at ``path`` of the mapping from ``where``) as type ``tp``;
    ``ValueError`` naming both when it does not fit. A nested dataclass table is merged over
    ``current`` (the value it replaces)."""
    name = f"{where}: {path}"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if isinstance(tp, type) and hasattr(tp, "from_json"):  # a value given by name (a rung)
        try:
            return tp.from_json(value)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    if origin is typing.Annotated:
        return convert(args[0], value, where, path, current)
    if origin in (typing.Union, types.UnionType):
        return _convert_union(args, value, where, path, current)
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{name}={value!r}; allowed: {', '.join(map(str, args))}")
        return value
    if tp is type(None):
        if value is not None:
            raise ValueError(f"{name}={value!r} must be None")
        return None
    if is_dataclass_type(tp):
        if isinstance(value, tp):
            return value
        base = current if isinstance(current, tp) else None
        return build_dataclass(tp, value, where, base, path)
    if tp is bool:
        return _typed(value, bool, name, "true or false")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name}={value!r} must be an int")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name}={value!r} must be a number")
        return float(value)
    if tp is str:
        return _typed(value, str, name, "a string")
    if tp is Path:
        return Path(_typed(value, (str, Path), name, "a path"))
    if origin is tuple:
        items = _typed(value, (list, tuple), name, "a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(args[0], v, where, f"{path}[{i}]") for i, v in enumerate(items))
        if len(items) != len(args):
            raise ValueError(f"{name}={value!r} must hold {len(args)} items")
        return tuple(convert(a, v, where, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, items, strict=True)))
    if origin in (list, dict) or tp in (list, dict):
        return _typed(value, origin or tp, name, f"a {(origin or tp).__name__}")
    return value


def _typed(value: Any, kind: Any, where: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise ValueError(f"{where}={value!r} must be {what}")
    return value


def _as_tuple(kind: Any) -> tuple[Any, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _convert_union(members: tuple[Any, ...], value: Any, where: str, path: str, current: Any) -> Any:
    """A union's member that takes ``value``: None for None (or ``"None"``); for a table, the
    dataclass :func:`_member` picks; else the first member that converts it."""
    if value is None or (value == NONE and type(None) in members):
        if type(None) in members:
            return None
        raise ValueError(f"{where}: {path} cannot be None")
    classes = [m for m in members if is_dataclass_type(m) and not hasattr(m, "from_json")]
    if isinstance(value, dict) and classes:
        return convert(_member(classes, value, where, path, current), value, where, path, current)
    errors = []
    for member in members:
        if member is type(None) or is_dataclass_type(member):
            continue
        try:
            return convert(member, value, where, path, current)
        except ValueError as err:
            errors.append(str(err))
    raise ValueError(errors[0] if errors else f"{where}: {path}={value!r} does not fit")


def _member(classes: list[type], table: dict[str, Any], where: str, path: str, current: Any) -> type:
    """The dataclass of a union that ``table`` builds: the one its tag names (a ``Literal`` field
    such as a frame generator's ``backbone``), else the kind ``current`` is of (a table changing a
    few fields keeps the kind it changes; a field of another kind is then an unknown setting), else
    the first."""
    tagged = [cls for cls in classes if any(
        k in table and typing.get_origin(hint) is Literal for k, hint in _hints(cls).items())]
    if tagged:
        named = [cls for cls in tagged if all(table[k] in typing.get_args(hint) for k, hint in _hints(cls).items()
                                              if k in table and typing.get_origin(hint) is Literal)]
        if not named:
            tags = sorted({str(a) for cls in tagged for k, hint in _hints(cls).items()
                           if k in table and typing.get_origin(hint) is Literal for a in typing.get_args(hint)})
            key = next(k for k, hint in _hints(tagged[0]).items() if k in table and typing.get_origin(hint) is Literal)
            raise ValueError(f"{where}: {path}.{key}={table[key]!r}; allowed: {', '.join(tags)}")
        return named[0]
    return next((cls for cls in classes if isinstance(current, cls)), classes[0])


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The settings of a ``.toml`` or ``.json`` config file as a mapping; ``ValueError`` naming the
    file when it is missing, of another kind or unreadable."""
    path = Path(path)
    if path.suffix not in FILE_SUFFIXES:
        raise ValueError(f"config file {str(path)!r}: give a {' or '.join(FILE_SUFFIXES)} file")
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r}: no such file")
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text())
        else:
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
                import tomli as tomllib  # type: ignore[no-redef]

            data = tomllib.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:  # tomllib's and json's errors are ValueErrors
        raise ValueError(f"config file {str(path)!r} is not valid {path.suffix[1:].upper()}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(path)!r} must hold a table of settings")
    return data


def config_toml(config: Any, hidden: dict[type, frozenset[str]] | None = None) -> str:
    """``config`` (a dataclass) as the TOML a config file holds: top-level settings first, then one
    table per nested part; a setting that is None is written as a comment (TOML has no None), and
    fields in ``hidden`` (per dataclass: set by the command) are left out."""
    hidden = hidden or {}
    lines: list[str] = []
    _toml_table(config, "", lines, hidden)
    return "\n".join(lines).strip() + "\n"


def _toml_table(config: Any, prefix: str, lines: list[str], hidden: dict[type, frozenset[str]]) -> None:
    skip = hidden.get(type(config), frozenset())
    nested = []
    if prefix:
        lines += ["", f"[{prefix}]"]
    for f in dataclasses.fields(config):
        if not f.init or f.name in skip:
            continue
        value = getattr(config, f.name)
        value = value.to_json() if hasattr(value, "to_json") else value  # a value given by name (a rung)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            nested.append((f.name, value))
        elif value == "(required)":
            lines.append(f"# {f.name} = (required)")
        elif value is None:
            lines.append(f"{f.name} = {json.dumps(NONE)}")
        else:
            lines.append(f"{f.name} = {_toml_value(value)}")
    for name, value in nested:
        _toml_table(value, f"{prefix}.{name}" if prefix else name, lines, hidden)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))
