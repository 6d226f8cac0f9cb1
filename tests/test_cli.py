import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import imageio.v3 as iio
import pytest
import torch
from conftest import write_toml

from worldsim.commands.cli import COMMANDS, load, main
from worldsim.commands.parsing import parse
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig


def test_list_envs_prints_every_task_and_the_suites(capsys):
    assert main(["list-envs"]) == 0
    out = capsys.readouterr().out
    assert "worldsim/PushCube-v0" in out and "tabletop-16" in out and "seen" in out


def test_list_envs_of_one_suite(capsys):
    assert main(["list-envs", "--suite", "tabletop-4"]) == 0
    out = capsys.readouterr().out
    assert "worldsim/StackCube-v0" in out and "worldsim/PushCube-Green-v0" not in out


def test_render_writes_a_video_of_a_successful_expert_episode(tmp_path, capsys):
    out = tmp_path / "push.mp4"
    assert main(["render", "--task", "ReachCube-v0", "--out", str(out), "--size", "64"]) == 0
    frames = iio.imread(out)
    assert frames.shape[1:] == (64, 64, 3) and len(frames) >= 3
    assert "success=True" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["push.mp4"]  # no temp files left
    assert out.stat().st_mode & 0o044  # readable by others, like any file the user writes


def test_render_bad_values_fail_clearly(tmp_path, capsys):
    assert main(["render", "--task", "PushCub-v0", "--out", str(tmp_path / "x.mp4")]) == 2
    assert "Did you mean 'PushCube-v0'" in capsys.readouterr().err
    assert main(["render", "--out", str(tmp_path / "x.avi")]) == 2
    assert "must end in one of .mp4, .gif" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- the command layer
def test_help_lists_every_command_with_the_first_line_of_its_docstring(capsys):
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    for name, command in COMMANDS.items():
        doc = inspect.getdoc(load(name))
        assert doc.splitlines()[0] == command.summary, name  # the listing never drifts from the command
        assert f"  {name} " in listing and command.summary in listing


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_has_help(name, capsys):
    assert main([name, "--help"]) == 0
    assert f"usage: worldsim {name}" in capsys.readouterr().out


def test_no_library_module_imports_tyro():
    root = Path(__file__).parents[1]
    sources = [p for folder in ("worldsim", "envs", "world_models", "policies")
               for p in (root / folder).rglob("*.py") if "commands" not in p.parts]
    assert sources and not [p for p in sources if re.search(r"^\s*(import|from) tyro", p.read_text(), re.M)]


def test_the_stages_import_each_other_one_way_only():
    """worldsim's stage packages form no import cycle (at module level or inside functions):
    training uses evaluation, never the other way round."""
    root = Path(__file__).parents[1] / "worldsim"
    above = {"data": ("training", "evaluation", "pipelines", "commands"),
             "evaluation": ("training", "pipelines", "commands"),
             "training": ("pipelines", "commands")}
    for package, higher in above.items():
        for path in (root / package).glob("*.py"):
            imported = re.findall(r"^\s*(?:from|import) worldsim\.(\w+)", path.read_text(), re.M)
            assert not set(imported) & set(higher), f"{path.name} imports {set(imported) & set(higher)}"


def test_the_command_line_imports_no_heavy_module():
    heavy = ("torch", "diffusers", "jax", "transformers", "matplotlib", "h5py", "sklearn", "tyro")
    code = (f"import sys, worldsim.commands.cli; print(sorted(m for m in {heavy!r} if m in sys.modules)); "
            "from worldsim.commands.cli import main; main(['list-envs']); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "[]"
    assert lines[-1] == "False"  # list-envs needs no torch either


def test_help_is_fast():
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "worldsim", "--help"], capture_output=True, text=True,
                         check=True)
    seconds = time.perf_counter() - start
    assert "train-bc" in out.stdout and out.stderr == ""
    # about 0.4 s on 2 idle cores (2.9 s when every command was imported); loose for busy machines
    assert seconds < 1.5 * 2


@pytest.mark.parametrize("argv", [["--help"], ["list-envs"], ["train-bc", "--help"]])
@pytest.mark.slow
def test_output_into_a_closed_pipe_ends_quietly(argv):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written, as after `| head`
    try:
        proc = subprocess.run([sys.executable, "-m", "worldsim", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    # 141 as for a writer killed by SIGPIPE; rich's console, when it notices first, exits with 1
    assert proc.stderr == "" and proc.returncode in (1, 141)


def test_usage_errors_end_in_one_line_and_exit_code_2(capsys):
    assert main(["evaluate", "--policy", "expert", "--episodez", "2"]) == 2
    one_line_error(capsys, "nrecognized options: --episodez", "`worldsim evaluate --help`")
    assert main(["evaluate"]) == 2
    one_line_error(capsys, "missing", "--policy")
    assert main(["evalute"]) == 2
    assert "unknown command 'evalute' (did you mean 'evaluate'?)" in capsys.readouterr().err
    assert main([]) == 2
    assert "error: name a command" in capsys.readouterr().err


def one_line_error(capsys, *needles: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert all(needle in lines[0] for needle in needles), lines[0]


def tiny_vla(path: Path, task: str = "PushCube-v0") -> Path:
    torch.manual_seed(0)
    TinyVLA(TinyVLAConfig.for_tasks([task], language="learned", channels=(4, 8), hidden_dim=16,
                                    feature_dim=16, language_dim=8, image_size=32)).save_pretrained(path)
    return path


@pytest.mark.parametrize("argv, needles", [
    (["train-wm", "--data", "/nonexistent.h5"], ["/nonexistent.h5", "no such file"]),  # a config's own check
    (["detect", "--data", "x.h5", "--videos", "-1"], ["videos=-1 must be an int >= 0"]),
    (["detect", "--data", "x.h5", "--alpha", "abc"], ["--alpha", "'abc'"]),  # tyro's conversion
    (["detect", "--data", "x.h5", "--cp", "foo" * 40], ["'--cp'", "'constant'"]),  # long: not wrapped
])
def test_values_tyro_refuses_end_in_one_line_and_exit_code_2(capsys, argv, needles):
    assert main(argv) == 2
    one_line_error(capsys, *needles)


def test_help_still_exits_0(capsys):
    assert main(["detect", "--help"]) == 0
    captured = capsys.readouterr()
    assert "--alpha" in captured.out and captured.err == ""


def test_missing_inputs_end_in_one_line_and_exit_code_2(tmp_path, capsys):
    nope = tmp_path / "nope"
    assert main(["evaluate", "--policy", str(nope)]) == 2
    one_line_error(capsys, f"no policy checkpoint at {nope}")
    assert main(["detect", "--data", str(tmp_path / "nope.h5"), "--out", str(tmp_path / "d")]) == 2
    one_line_error(capsys, f"no dataset file at {tmp_path / 'nope.h5'}")
    for command in (["eval-wm"], ["imagine", "--out", str(tmp_path / "i.mp4")]):
        assert main([*command, "--world-model", str(nope), "--data", str(tmp_path / "x.h5")]) == 2
        one_line_error(capsys, f"no world model at {nope}")
    assert main(["train-rl", "--policy", str(nope), "--out", str(tmp_path / "rl"), "--no-progress"]) == 2
    one_line_error(capsys, f"no policy checkpoint at {nope}")
    assert main(["coevolve", "--base-policy", str(nope), "--task", "PushCube-v0",
                 "--out", str(tmp_path / "co" / "run")]) == 2
    one_line_error(capsys, f"no policy checkpoint at {nope}")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output folder left behind


def test_a_folder_created_for_outputs_is_removed_when_the_command_fails(tmp_path, capsys):
    policy = tiny_vla(tmp_path / "policy")
    settings = tmp_path / "settings"
    settings.mkdir()
    round0 = write_toml(settings / "round0.toml", f"round0_from = {str(tmp_path)!r}\n")
    # coevolve creates --out, then finds round0_from holds no run
    assert main(["coevolve", "--base-policy", str(policy), "--task", "PushCube-v0", "--config-file", str(round0),
                 "--out", str(tmp_path / "runs" / "co")]) == 2
    one_line_error(capsys, "holds no co-evolution run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy", "settings"]
    (tmp_path / "kept").mkdir()
    assert main(["coevolve", "--base-policy", str(policy), "--task", "PushCube-v0", "--config-file", str(round0),
                 "--out", str(tmp_path / "kept")]) == 2
    assert (tmp_path / "kept").is_dir()  # existed before: not the command's to remove


def test_genuine_bugs_keep_their_traceback(monkeypatch):
    import worldsim.evaluation.render

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(worldsim.evaluation.render, "render_expert", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["render", "--task", "ReachCube-v0"])


def test_default_outputs_go_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["render", "--task", "ReachCube-v0", "--size", "32"]) == 0
    assert main(["evaluate", "--policy", "expert", "--task", "ReachCube-v0", "--episodes", "1",
                 "--num-envs", "1", "--video"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    assert (tmp_path / "runs" / "render" / "expert.mp4").stat().st_size > 0
    assert (tmp_path / "runs" / "evaluate" / "videos" / "ReachCube-v0_0.mp4").stat().st_size > 0


def test_train_rl_takes_the_chosen_algorithms_options(tmp_path):
    from worldsim.commands.train import train_rl
    from worldsim.training.grpo import GRPOConfig
    from worldsim.training.ppo import PPOConfig

    file = write_toml(tmp_path / "ppo.toml", "gamma = 0.9\nhidden = [64, 64]\n")  # PPO's settings off the flags
    ppo = parse(train_rl, ["--task", "PushCube-v0", "--config-file", str(file)], "worldsim train-rl")
    assert isinstance(ppo, PPOConfig) and ppo.gamma == 0.9 and ppo.hidden == (64, 64)
    with pytest.raises(ValueError, match="unknown setting.* gamma; known: "):  # GRPO has no gamma
        parse(train_rl, ["--algo", "grpo", "--config-file", str(file)], "worldsim train-rl")
    grpo = parse(train_rl, ["--algo=grpo", "--group-size", "4", "--num-envs", "8"], "worldsim train-rl")
    assert isinstance(grpo, GRPOConfig) and grpo.group_size == 4
    with pytest.raises(ValueError, match="--group-size is not an option of ppo; leave it out or use --algo "
                                         "grpo"):
        parse(train_rl, ["--group-size", "4"], "worldsim train-rl")
    with pytest.raises(ValueError, match="--algo 'sac' is not a choice; allowed: ppo, grpo"):
        parse(train_rl, ["--algo", "sac"], "worldsim train-rl")


def test_every_command_that_imagines_takes_one_imagination_config_with_the_same_flags(tmp_path):
    from worldsim.envs.imagination import ORACLE, PIXELS, ImaginationConfig

    # the sampling steps and threshold are a config file's [imagination] settings
    file = write_toml(tmp_path / "imagination.toml", """
        [imagination]
        sampling_steps = 2
        success_threshold = 0.4
        """)
    imagine = ["--world-model", "wm", "--keyframes", "k.h5", "--rung", "oracle", "--judge", "head",
               "--config-file", str(file)]
    training = ["--keyframe-ratio", "0", "--horizon", "None", "--reward-type", "dense"]
    required = {"collect": ["--out", "x.h5"], "evaluate": ["--policy", "p"], "rank-policies": ["--policies", "a", "b"],
                "imagined-vs-real": ["--policy", "p"], "train-rl": ["--algo", "grpo", "--obs-mode", "pixels"]}
    for name, extra in (("train-rl", training), ("collect", training), ("imagined-vs-real", training[:4]),
                        ("evaluate", []), ("rank-policies", [])):
        config = parse(load(name), [*required[name], *imagine, *extra], f"worldsim {name}")
        assert isinstance(config.imagination, ImaginationConfig), name
        assert (config.imagination.world_model, config.imagination.rung, config.imagination.judge,
                config.imagination.sampling_steps, config.imagination.success_threshold) == (
            Path("wm"), ORACLE, "head", 2, 0.4), name
        if extra:
            assert (config.imagination.keyframe_ratio, config.imagination.horizon) == (0.0, None), name
    # the defaults: the pixels rung judged as the model was trained to; training imagines 40 steps from
    # starts half at keyframes
    default = parse(load("train-rl"), [], "worldsim train-rl").imagination
    assert default == ImaginationConfig() and (default.rung, default.judge) == (PIXELS, None)
    assert not default.imagined
    # a command hides what it sets itself: evaluations run whole episodes from episode starts, a
    # trainer's world model runs on its --device, co-evolution trains its own world model
    with pytest.raises(ValueError, match="--horizon"):
        parse(load("evaluate"), ["--policy", "p", "--horizon", "10"], "worldsim evaluate")
    guard = write_toml(tmp_path / "guard.toml", "[guard]\nmax_real_drop = 0.2\n")
    coevolve = parse(load("coevolve"), ["--base-policy", "p", "--device", "cpu", "--rung", "oracle",
                                        "--config-file", str(guard)], "worldsim coevolve")
    assert coevolve.imagination.device == "cpu" and coevolve.imagination.rung is ORACLE
    assert coevolve.guard.max_real_drop == 0.2
    for name, args in (("coevolve", ["--base-policy", "p", "--world-model", "wm"]),
                       ("coevolve", ["--base-policy", "p", "--max-real-drop", "0.2"]),  # a config file's
                       ("train-rl", ["--world-model", "wm", "--keyframes", "k", "--imagination.device", "cpu"]),
                       ("train-rl", ["--algo", "grpo", "--rl.env-steps", "8"])):  # no dotted flags
        with pytest.raises(ValueError, match="unrecognized options"):
            parse(load(name), args, f"worldsim {name}")
    for name, args in (("coevolve", ["--base-policy", "p"]),
                       ("train-rl", ["--world-model", "wm", "--keyframes", "k"])):
        own = write_toml(tmp_path / "own.toml", '[imagination]\ndevice = "cpu"\n')
        with pytest.raises(ValueError, match="imagination.device is set by the command itself"):
            parse(load(name), [*args, "--config-file", str(own)], f"worldsim {name}")


def test_task_lists_take_one_task_per_flag_and_other_lists_stay_as_they_were():
    from worldsim.commands.evaluate import evaluate, rank_policies
    from worldsim.commands.failure import detect

    two = ["--task", "ReachCube-v0", "--task", "PushCube-v0"]
    assert parse(evaluate, ["--policy", "expert", *two], "worldsim evaluate").task == (
        "ReachCube-v0", "PushCube-v0")
    ranking = parse(rank_policies, ["--world-model", "wm", "--keyframes", "k.h5", "--policies", "a", "b",
                                    *two], "worldsim rank-policies")
    assert ranking.task == ("ReachCube-v0", "PushCube-v0") and ranking.policies == (Path("a"), Path("b"))
    detection = parse(detect, ["--data", "x.h5", "--seen-tasks", "ReachCube-v0", "--seen-tasks",
                               "PushCube-v0", "--seeds", "0", "1"], "worldsim detect")
    assert detection.seen_tasks == ("ReachCube-v0", "PushCube-v0") and detection.seeds == (0, 1)
