"""Settings from config files (``--config-file``), ``--print-config``, and the size of every
command's command line: at most 25 flags, each a field its config names in ``COMMAND_LINE``."""

import dataclasses
import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import tomllib
from conftest import write_toml

from worldsim.commands.cli import COMMANDS, load, main
from worldsim.commands.parsing import MAX_FLAGS, Choice, config_type, nested_parts, parse, set_by_command


@pytest.fixture
def data(tmp_path) -> Path:
    """An (empty) episode file: the configs check that it exists, the parsing reads nothing."""
    path = tmp_path / "d.h5"
    path.write_bytes(b"")
    return path


def one_line_error(capsys, *needles: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


def train_wm(args: list[str]):
    return parse(load("train-wm"), args, "worldsim train-wm")


# ----------------------------------------------------------------------------- --config-file
def test_a_config_file_sets_what_no_flag_does_and_flags_beside_it_win(data, tmp_path):
    file = write_toml(tmp_path / "wm.toml", """
        steps = 5
        val_every = 7
        time_budget = 60.0

        [model.frames]
        anchor = "last"

        [model.dynamics]
        horizon = 4
        """)
    config = train_wm(["--data", str(data), "--config-file", str(file)])
    assert (config.steps, config.val_every, config.time_budget) == (5, 7, 60.0)  # file-only: val_every, time_budget
    assert config.model == {"frames": {"anchor": "last"}, "dynamics": {"horizon": 4}}
    assert config.architecture.frames.anchor == "last" and config.architecture.dynamics.horizon == 4
    assert config.architecture.frames.gripper_planes  # the rest is the tiny preset's
    # a flag given beside the file wins, before or after it
    for args in (["--steps", "9", "--config-file", str(file)], ["--config-file", str(file), "--steps", "9"]):
        config = train_wm(["--data", str(data), *args])
        assert config.steps == 9 and config.val_every == 7
    # the same settings as JSON
    same = tmp_path / "wm.json"
    same.write_text(json.dumps(tomllib.loads(file.read_text())))
    assert train_wm(["--data", str(data), "--config-file", str(same)]) == train_wm(
        ["--data", str(data), "--config-file", str(file)])
    # the required settings may come from the file too
    with_data = write_toml(tmp_path / "all.toml", f"data = {str(data)!r}\n" + file.read_text())
    assert train_wm(["--config-file", str(with_data)]).data == data


def test_a_nested_part_is_a_table_and_its_flags_still_win(tmp_path, data):
    file = write_toml(tmp_path / "eval.toml", """
        near_miss = 0.05
        physics_ceiling = false

        [imagination]
        rung = "oracle"
        sampling_steps = 2
        success_threshold = 0.3
        placebo = "static"
        """)
    args = ["--world-model", "wm", "--data", str(data), "--config-file", str(file)]
    config = parse(load("eval-wm"), args, "worldsim eval-wm")
    assert (config.near_miss, config.physics_ceiling) == (0.05, False)
    imagination = config.imagination
    assert (imagination.rung.name, imagination.sampling_steps, imagination.success_threshold) == ("oracle", 2, 0.3)
    assert imagination.placebo == "static"  # a control arm: a config file's setting
    config = parse(load("eval-wm"), [*args, "--rung", "video"], "worldsim eval-wm")
    assert config.imagination.rung.name == "video" and config.imagination.sampling_steps == 2


def test_bad_config_files_are_one_line_errors_with_exit_code_2(data, tmp_path, capsys):
    def run(text: str, *extra: str, suffix: str = ".toml", command: str = "train-wm") -> int:
        file = tmp_path / f"bad{suffix}"
        file.write_text(text)
        args = ["--data", str(data)] if command == "train-wm" else ["--world-model", "wm", "--data", str(data)]
        return main([command, *args, "--config-file", str(file), *extra])

    assert run("stepz = 3\n") == 2
    one_line_error(capsys, "bad.toml", "unknown setting(s) stepz", "known: ")
    assert run("[imagination]\nrungz = 'oracle'\n", command="eval-wm") == 2
    one_line_error(capsys, "unknown setting(s) rungz in [imagination]")
    assert run("steps = 'many'\n") == 2
    one_line_error(capsys, "steps='many' must be an int")
    assert run("steps = 0\n") == 2
    one_line_error(capsys, "steps=0 must be an int >= 1")
    assert run("[model.frames]\nchannel = [8]\n") == 2  # the architecture is checked when the file is read
    one_line_error(capsys, "[frames]", "channel")
    assert run("steps = \n") == 2
    one_line_error(capsys, "is not valid TOML")
    assert run("steps: 3\n", suffix=".yaml") == 2
    one_line_error(capsys, "give a .toml or .json file")
    assert main(["train-wm", "--data", str(data), "--config-file", str(tmp_path / "missing.toml")]) == 2
    one_line_error(capsys, "missing.toml", "no such file")
    # a setting the command sets itself: neither a flag nor a config file's
    assert run("[imagination]\nhorizon = 3\n", command="eval-wm") == 2
    one_line_error(capsys, "imagination.horizon is set by the command itself")
    assert main(["eval-wm", "--world-model", "wm", "--data", str(data), "--horizon", "3"]) == 2
    one_line_error(capsys, "unrecognized options: --horizon")
    assert not (tmp_path / "wm").exists() and not Path("runs/wm").exists()


# ----------------------------------------------------------------------------- --print-config
REQUIRED = {"collect": ["--out", "x.h5"], "dataset-info": ["{data}"], "export": ["--data", "{data}", "--out", "ds"],
            "import": ["--data", "ds", "--out", "x.h5"], "train-bc": ["--data", "{data}"],
            "evaluate": ["--policy", "p"], "train-wm": ["--data", "{data}"], "detect": ["--data", "{data}"],
            "rank-policies": ["--policies", "a", "b", "--world-model", "wm", "--keyframes", "k.h5"],
            "imagined-vs-real": ["--policy", "p", "--world-model", "wm", "--keyframes", "k.h5"],
            "eval-wm": ["--world-model", "wm", "--data", "{data}"],
            "imagine": ["--world-model", "wm", "--data", "{data}"],
            "coevolve": ["--base-policy", "p", "--task", "PushCube-v0"],
            "foresight": ["--data", "{data}", "--world-model", "wm", "--policy", "p"],
            "record-features": ["--data", "{data}", "--policy", "p", "--out", "x.h5"]}
"""What each command's command line must give (``{data}``: an existing file)."""


def printed(command: str, args: list[str], capsys) -> str:
    capsys.readouterr()
    assert main([command, *args, "--print-config"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command, choice", [(name, []) for name in COMMANDS] + [("train-rl", ["--algo", "grpo"])],
                         ids=[*COMMANDS, "train-rl-grpo"])
def test_print_config_prints_toml_that_gives_the_same_config_back(command, choice, data, tmp_path, capsys):
    args = [*choice, *(a.format(data=data) for a in REQUIRED.get(command, []))]  # a choice is a flag, not a setting
    text = printed(command, args, capsys)
    tomllib.loads(text)  # valid TOML
    file = write_toml(tmp_path / "printed.toml", text)
    again = parse(load(command), [*choice, "--config-file", str(file)], f"worldsim {command}")
    assert again == parse(load(command), args, f"worldsim {command}")
    assert printed(command, [*choice, "--config-file", str(file)], capsys) == text


def test_print_config_shows_flags_files_and_the_architecture_changes_and_runs_nothing(data, tmp_path, capsys):
    file = write_toml(tmp_path / "wm.toml", """
        val_every = 7

        [model.frames]
        anchor = "last"
        """)
    args = ["--data", str(data), "--steps", "9", "--out", str(tmp_path / "run"), "--config-file", str(file)]
    text = printed("train-wm", args, capsys)
    assert train_wm(["--config-file", str(write_toml(tmp_path / "printed.toml", text))]) == train_wm(args)
    settings = tomllib.loads(text)
    assert (settings["steps"], settings["val_every"], settings["model"]) == (9, 7, {"frames": {"anchor": "last"}})
    assert settings["preset"] == "tiny" and settings["time_budget"] == "None"  # TOML has no null
    assert not (tmp_path / "run").exists()  # nothing ran
    # what a command sets itself is not printed: feeding the file back would refuse it
    text = printed("eval-wm", ["--world-model", "wm", "--data", str(data)], capsys)
    assert "[imagination]" in text and not re.search(r"^#? ?horizon =", text, re.M)
    coevolve = tomllib.loads(printed("coevolve", REQUIRED["coevolve"], capsys))
    assert {"world_model", "keyframes", "device"}.isdisjoint(coevolve["imagination"])
    assert {"guard", "wm", "rl"} <= set(coevolve)  # the parts only a file sets


def test_print_config_round_trips_a_setting_set_to_none(tmp_path, capsys):
    """TOML has no None: a setting whose default is not None, set to None on the command line
    (train-rl's imagined episodes run to the time limit), must still come back as None."""
    args = ["--algo", "grpo", "--obs-mode", "pixels", "--world-model", "wm", "--keyframes", "k.h5", "--horizon", "None"]
    config = parse(load("train-rl"), args, "worldsim train-rl")
    assert config.imagination.horizon is None
    file = write_toml(tmp_path / "printed.toml", printed("train-rl", args, capsys))
    again = parse(load("train-rl"), ["--algo", "grpo", "--config-file", str(file)], "worldsim train-rl")
    assert again.imagination.horizon is None and again == config


# ----------------------------------------------------------------------------- the flags
OPTION = re.compile(r"^(?:│ |  )(-[a-zA-Z]\b|--[\w-]+)")
"""An option line of a ``--help``: in a box (``│ --x``), or plain (``  --x``) where stdout cannot draw
one; help text and its continuation lines are indented further."""


def help_options(command: str, extra: list[str], capfd, monkeypatch) -> list[str]:
    """The option lines of ``worldsim command --help`` at 80 columns (``-h`` left out)."""
    monkeypatch.setenv("COLUMNS", "80")
    capfd.readouterr()
    assert main([command, *extra, "--help"]) == 0
    lines = capfd.readouterr().out.splitlines()
    return [line for line in lines if OPTION.match(line) and OPTION.match(line)[1] != "-h"]


@pytest.mark.parametrize("command, extra", [(name, []) for name in COMMANDS] + [("train-rl", ["--algo", "grpo"])],
                         ids=[*COMMANDS, "train-rl-grpo"])
def test_every_command_lists_at_most_25_options(command, extra, capfd, monkeypatch):
    options = help_options(command, extra, capfd, monkeypatch)
    assert len(options) <= MAX_FLAGS == 25, (len(options), options)
    assert options or command == "dataset-info"  # its one argument is positional
    # and each is a field its config names as a flag
    flags = {OPTION.match(line)[1] for line in options}
    names = set()
    for cls in command_classes(command):
        shown = shown_fields(cls)
        names |= {"--" + name.replace("_", "-") for name in shown}
    assert flags <= names | {"--algo"}, flags - names


def command_classes(command: str) -> list[type]:
    """The config dataclasses of ``command``: its own (each choice's), with their flat parts."""
    target = config_type(load(command))
    choice = next((m for m in getattr(target, "__metadata__", ()) if isinstance(m, Choice)), None)
    classes = list(choice.choices.values()) if choice is not None else [target]
    return [*classes, *(part for cls in classes for part, _ in nested_parts(cls).values())]


def shown_fields(cls: type) -> set[str]:
    """The fields of ``cls`` that its classes name in ``COMMAND_LINE`` (all, when none does)."""
    declared = [vars(k)["COMMAND_LINE"] for k in cls.__mro__ if "COMMAND_LINE" in vars(k)]
    names = {f.name for f in dataclasses.fields(cls)}
    return {n for names_ in declared for n in names_} if declared else names


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_line_name_is_a_field_of_its_config(command):
    for cls in command_classes(command):
        for owner in cls.__mro__:
            if "COMMAND_LINE" in vars(owner):
                fields = {f.name for f in dataclasses.fields(owner)}
                missing = set(vars(owner)["COMMAND_LINE"]) - fields
                assert not missing, f"{owner.__name__}.COMMAND_LINE names {missing}, which are not its fields"
        for part, names in set_by_command(cls).items():
            missing = set(names) - {f.name for f in dataclasses.fields(part)}
            assert not missing, f"{cls.__name__}.SET_BY_COMMAND names {missing}, which are not {part.__name__}'s"


def test_help_ends_with_the_note_about_config_files(capsys):
    for command in ("train-wm", "coevolve", "eval-wm"):
        assert main([command, "--help"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "--config-file FILE (flags given beside it win)" in out and "--print-config" in out


def test_print_config_to_a_stream_is_the_whole_output(data):
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as exit:
        parse(load("train-wm"), ["--data", str(data), "--print-config"], "worldsim train-wm")
    assert exit.value.code == 0 and tomllib.loads(out.getvalue())["data"] == str(data)  # TOML and nothing else
