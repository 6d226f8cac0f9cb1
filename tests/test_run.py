"""The run around every trainer (worldsim.runtime.run): the step budget, the time budget as a
loud safety net, exact resume and its refusal of changed settings, and the output-folder rule."""

import dataclasses
import gzip
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from worldsim.runtime.checkpoint import CHECKPOINT_FILE, load_checkpoint
from worldsim.runtime.profiling import PROFILE_AFTER, step_summary
from worldsim.runtime.run import TrainingRun, success_text
from worldsim.runtime.run_logging import read_metrics
from worldsim.runtime.settings import RunSettings, check_run_settings

RUN_CONFIG = {"lr": 0.1, "batch": 4, "note": "free to change"}


def Settings(out: Path, **changes: Any) -> RunSettings:  # noqa: N802  # reads as the dataclass it builds
    """The run settings every trainer shares, quiet and on the CPU."""
    return RunSettings(out=out, **{"device": "cpu", "progress": False, **changes})


class Model(torch.nn.Linear):
    def __init__(self) -> None:
        super().__init__(2, 1)

    def save_pretrained(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), path / "weights.pt")


def train(settings: RunSettings, steps: int, run_config: dict | None = None, step_seconds: float = 0.0):
    """A stand-in trainer shaped like the real ones: one random draw per step (the RNG state is
    what a resume must restore), a checkpoint every 2 steps and at the end."""
    run = TrainingRun("toy", settings)
    model = Model()
    step = 0
    state = run.restore(run_config or RUN_CONFIG, ("lr", "batch"))
    if state is not None:
        model.load_state_dict(state["model"])
        step = state["step"]
    run.start(steps, done=step)
    draws = []
    while run.keep_going(step):
        draws.append(torch.rand(()).item())
        time.sleep(step_seconds)
        step += 1
        run.log_train(step, {"loss": draws[-1]}, every=1)
        if step % 2 == 0:
            run.save(model, "model", {"model": model.state_dict(), "step": step})
    run.save(model, "model", {"model": model.state_dict(), "step": step})
    return run, run.finish(run.summary(model), f"last draw {draws[-1] if draws else None}"), draws


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_step_budget_is_exact_and_the_result_is_printed(tmp_path, capsys):
    _, summary, draws = train(Settings(tmp_path / "run", torch_threads=1), steps=7)
    assert len(draws) == 7 and summary["torch_threads"] == 1
    assert summary["steps"] == summary["steps_asked"] == 7 and summary["stopped_by"] == "steps"
    assert summary["world_size"] == 1 and summary["ranks_in_sync"] and summary["train_seconds"] >= 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == summary
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == list(range(1, 8))
    assert load_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)["step"] == 7
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == RUN_CONFIG
    captured = capsys.readouterr()
    assert captured.out == f"toy: 7 of 7 steps; last draw {draws[-1]}\n" and "time budget" not in captured.err


def test_a_time_budget_stop_is_warned_shown_on_the_bar_and_recorded(tmp_path, capsys):
    run, summary, draws = train(Settings(tmp_path / "run", time_budget=0.05, progress=True), steps=1000,
                                step_seconds=0.01)
    done = summary["steps"]
    assert 1 <= done < 1000 and len(draws) == done
    assert summary["stopped_by"] == "time_budget" and summary["steps_asked"] == 1000
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stopped_by"] == "time_budget"
    assert load_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)["step"] == done  # stopped cleanly
    captured = capsys.readouterr()
    warning = (f"toy: time budget of 0.05 s reached at step {done} of 1,000 — results are not reproducible "
               "across machines")
    assert captured.err.count(warning) == 1
    shown = "toy (stopped by the time budget)"
    assert shown in run.bar.desc and shown in captured.err  # the progress bar's last state
    assert captured.out.startswith(f"toy: {done} of 1,000 steps (stopped by the time budget); ")


def test_a_run_cut_short_resumes_exactly_and_takes_a_step_per_session(tmp_path):
    _, _, straight = train(Settings(tmp_path / "straight"), steps=6)
    _, first, draws = train(Settings(tmp_path / "run", time_budget=1e-9), steps=6)
    assert first["steps"] == 1 and first["stopped_by"] == "time_budget"  # a session takes one step at least
    _, second, more = train(Settings(tmp_path / "run", resume=True, time_budget=1e-9), steps=6)
    assert second["steps"] == 2
    _, last, rest = train(Settings(tmp_path / "run", resume=True), steps=6)
    assert last["steps"] == 6 and last["stopped_by"] == "steps"
    assert draws + more + rest == straight  # the RNG states travel with the checkpoint
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == list(range(1, 7))


def test_resume_refuses_changed_settings_naming_each_of_them(tmp_path):
    train(Settings(tmp_path / "run"), steps=2)
    changed = {**RUN_CONFIG, "lr": 0.2, "batch": 8}
    with pytest.raises(ValueError, match=r"changed since it was written \(lr: 0.1 -> 0.2; batch: 4 -> 8\)"):
        train(Settings(tmp_path / "run", resume=True), steps=4, run_config=changed)
    free = {**RUN_CONFIG, "note": "x"}
    _, summary, _ = train(Settings(tmp_path / "run", resume=True), steps=4, run_config=free)
    assert summary["steps"] == 4  # a setting outside the resume fields may change
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        train(Settings(tmp_path / "fresh", resume=True), steps=2)


def test_an_earlier_run_in_out_is_refused_unless_overwrite_or_resume(tmp_path):
    out = tmp_path / "run"
    train(Settings(out), steps=2)
    before = files(out)
    with pytest.raises(FileExistsError, match="already holds files.*--overwrite.*--resume"):
        TrainingRun("toy", Settings(out))
    assert files(out) == before  # untouched
    (out / "stale.txt").write_text("from another run")
    _, summary, _ = train(Settings(out, overwrite=True), steps=3)
    assert not (out / "stale.txt").exists() and summary["steps"] == 3
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]  # one run's history
    _, summary, _ = train(Settings(out, resume=True), steps=5)
    assert summary["steps"] == 5


def test_run_settings_are_checked():
    with pytest.raises(ValueError, match="pass one"):
        check_run_settings(Settings(Path("x"), resume=True, overwrite=True))
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"time_budget={bad!r} must be a number of seconds > 0"):
            check_run_settings(Settings(Path("x"), time_budget=bad))
    check_run_settings(Settings(Path("x"), time_budget=0.5))
    for name, bad, least in (("torch_threads", 0, 1), ("seed", -2, 0), ("seed", True, 0)):
        with pytest.raises(ValueError, match=f"{name}={bad!r} must be an int >= {least}"):
            check_run_settings(Settings(Path("x"), **{name: bad}))


def test_every_trainer_shares_one_run_settings_dataclass_listed_last_in_help(capfd):
    from worldsim.commands.cli import load
    from worldsim.commands.parsing import parse
    from worldsim.training.bc import BCConfig
    from worldsim.training.grpo import GRPOConfig
    from worldsim.training.ppo import PPOConfig
    from worldsim.world_models.train import TrainWMConfig

    shared = [f.name for f in dataclasses.fields(RunSettings)]
    outs = {}
    for config in (BCConfig, PPOConfig, GRPOConfig, TrainWMConfig):
        assert issubclass(config, RunSettings)
        outs[config.__name__] = next(f.default for f in dataclasses.fields(config) if f.name == "out")
    assert outs == {"BCConfig": Path("runs/bc"), "PPOConfig": Path("runs/ppo"), "GRPOConfig": Path("runs/grpo"),
                    "TrainWMConfig": Path("runs/wm")}
    assert PPOConfig().torch_threads == 1 and RunSettings().torch_threads is None  # RL's own default
    assert parse(load("train-rl"), ["--seed", "3", "--out", "o"], "worldsim train-rl").seed == 3
    with pytest.raises(SystemExit):
        parse(load("train-bc"), ["--help"], "worldsim train-bc")
    flags = re.findall(r"^│ --([a-z][a-z-]*)", capfd.readouterr().out, re.M)  # option lines of the box
    assert set(RunSettings.COMMAND_LINE) < set(shared)
    run_flags = [name.replace("_", "-") for name in RunSettings.COMMAND_LINE]
    first = min(flags.index(f) for f in run_flags)
    assert set(flags[first:]) - {"no-resume", "no-overwrite", "no-progress"} == set(run_flags)  # the run's last
    assert "time-budget" not in flags and "profile" not in flags  # a config file's settings


def test_success_text_gives_the_rate_with_its_interval():
    result = {"success_rate": 0.45, "pooled_ci95": [0.356, 0.548], "episodes": 100}
    assert success_text(result) == "success 45.0% (95% CI 35.6%-54.8%, 100 episodes)"


def test_a_profile_traces_the_asked_steps_after_the_warm_up(tmp_path):
    run, summary, draws = train(Settings(tmp_path / "run", profile=3), steps=PROFILE_AFTER + 5)
    folder = tmp_path / "run" / "profile"
    profiled = json.loads((folder / "summary.json").read_text())
    assert profiled["steps"] == 3 and profiled["ms_per_step"] > 0 and profiled["device_busy_percent"] is None
    names = {e.get("name") for e in json.loads(gzip.decompress((folder / "trace.json.gz").read_bytes()))["traceEvents"]}
    assert {f"ProfilerStep#{PROFILE_AFTER + k}" for k in range(3)} <= names  # the steps after the warm-up
    assert "aten::rand" in (folder / "operations.md").read_text()
    assert len(draws) == PROFILE_AFTER + 5  # profiling changes nothing the run does


def test_the_device_busy_share_counts_overlapping_kernels_once():
    steps = [{"name": "ProfilerStep#10", "ph": "X", "ts": 0, "dur": 5000},
             {"name": "ProfilerStep#11", "ph": "X", "ts": 5000, "dur": 5000}]
    kernels = [{"cat": "kernel", "ph": "X", "ts": ts, "dur": dur} for ts, dur in
               ((0, 1000), (500, 1000), (4000, 500), (9000, 2000))]  # overlapping; the last runs past the steps
    summary = step_summary(steps + kernels + [{"cat": "cpu_op", "ph": "X", "ts": 0, "dur": 10000}])
    assert summary["steps"] == 2 and summary["ms_per_step"] == 5.0
    assert summary["device_busy_percent"] == 30.0  # 1.5 + 0.5 + 1.0 ms of 10 ms
    assert summary["idle_gaps_over_1ms"] == 2 and summary["idle_ms_in_those_gaps_per_step"] == 3.5  # (2.5 + 4.5) / 2


def test_a_negative_or_boolean_profile_is_refused(tmp_path):
    for bad in (-1, True):
        with pytest.raises(ValueError, match="profile="):
            check_run_settings(Settings(tmp_path, profile=bad))
