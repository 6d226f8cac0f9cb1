"""Co-evolution end to end on tiny settings: stages, budget accounting, the guard, resume, report."""

import json

import pytest
import torch
from conftest import write_toml

from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.tasks import get_task
from worldsim.pipelines.coevolve import CoevolveConfig, GuardConfig, coevolve, direct_rl_epochs, guard
from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelRounds
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig
from worldsim.runtime.run_logging import to_jsonable

INSTRUCTION = "push the red cube onto the blue square"


@pytest.fixture(scope="module")
def base_policy(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("coevolve") / "vla"
    TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), image_size=32, language="learned", channels=(8, 8),
                          hidden_dim=32, feature_dim=32)).save_pretrained(path)
    return path


def tiny(base_policy, out, **kwargs):
    return CoevolveConfig(**{**dict(
        base_policy=base_policy, task="PushCube-v0", real_episodes=2, rounds=2,
        # two episodes of an untrained policy show the cubes at too few places to fit a camera to
        wm=WorldModelRounds(steps=2, refine_steps=2, model={"camera": "scene"}),
        rl=RLRounds(env_steps=1, num_envs=2, group_size=2),
        eval_episodes=2, imagined_eval_episodes=2,
        imagination=ImaginationConfig(horizon=3), videos=1, out=out, device="cpu", progress=False), **kwargs})


@pytest.mark.slow
def test_two_rounds_of_coevolution_leave_a_full_report(base_policy, tmp_path):
    results = coevolve(tiny(base_policy, tmp_path / "run", test_episodes=3))
    run = tmp_path / "run"
    assert [r["round"] for r in results["rounds"]] == [0, 1, 2]
    assert results["real_budget"] == 4  # 2 collections of 2 episodes
    assert [r["real_episodes_used"] for r in results["rounds"]] == [2, 2, 4]
    assert all(r["real"]["per_task"]["PushCube-v0"]["episodes"] == 2 for r in results["rounds"])
    assert all(r["imagined"]["episodes"] == 2 for r in results["rounds"])
    assert (run / "round_1" / "all.h5").exists() and (run / "round_1" / "wm" / "world_model").is_dir()
    assert not (run / "round_2" / "data.h5").exists()  # the last round collects nothing
    assert (run / "success.png").stat().st_size > 0 and (run / "videos" / "PushCube-v0_real_vs_imagined.mp4").exists()
    report = (run / "report.md").read_text()
    assert "| 2 |" in report and "real training episodes (budget): **4**" in report.lower()
    # the base and the final (last accepted) policy, on episodes of their own that pair up
    test, final = results["test"], [r for r in results["rounds"] if r["accepted"]][-1]
    assert test["seed"] == 30_000 and test["episodes_per_task"] == 3 and test["comparison"]["episodes"] == 3
    assert test["base"]["round"] == 0 and test["final"]["round"] == final["round"]
    assert test["final"]["real"]["per_task"]["PushCube-v0"]["episodes"] == 3
    assert "On 3 test episodes per task that no round saw" in report
    state = json.loads((run / "state.json").read_text())
    # 10 stages, a verdict per round, and the test of each policy
    assert len(state["stages"]) == 10 + 2 + len({0, final["round"]})
    # everything is recorded: a resumed run redoes nothing and reproduces the results
    again = coevolve(tiny(base_policy, run, resume=True, test_episodes=3))
    assert again["rounds"] == results["rounds"] and again["test"] == results["test"]
    # the default: the pixels rung, on the run's device
    assert state["config"]["imagination"] | {"horizon": 40} == to_jsonable(ImaginationConfig(device="cpu"))
    with pytest.raises(ValueError, match="settings changed since it started \\(imagination"):
        coevolve(tiny(base_policy, run, resume=True, test_episodes=3,
                      imagination=ImaginationConfig(horizon=3, rung="oracle")))
    # ... and reports the whole run's time, not the few seconds the resumed call took
    stage_seconds = sum(stage["seconds"] for stage in state["stages"].values())
    assert again["wall_clock_s"] == results["wall_clock_s"] == pytest.approx(stage_seconds, abs=0.1)
    assert results["wall_clock_s"] > 0
    with pytest.raises(ValueError, match="--resume"):
        coevolve(tiny(base_policy, run))
    with pytest.raises(ValueError, match="settings changed since it started \\(rounds; only a co-evolution"):
        coevolve(tiny(base_policy, run, resume=True, rounds=1))
    with pytest.raises(ValueError, match="settings changed since it started \\(rounds, eval_episodes"):
        coevolve(tiny(base_policy, run, resume=True, rounds=3, eval_episodes=3))
    # the guard's settings may change: recorded verdicts stand, later rounds are judged by the new ones
    state = json.loads((run / "state.json").read_text())
    state["stages"]["round 2: guard"] |= {"accepted": False, "reasons": ["judged by the old settings"]}
    (run / "state.json").write_text(json.dumps(state))
    anything = GuardConfig(max_real_drop=1.0, divergence_threshold=1.0)
    rejudged = coevolve(tiny(base_policy, run, resume=True, guard=anything))
    assert rejudged["rounds"][2]["reasons"] == ["judged by the old settings"] and not rejudged["rounds"][2]["accepted"]
    assert rejudged["rounds"][1] == results["rounds"][1] and rejudged["test"] is None
    # more rounds extend the run: rounds 1-2 stay as recorded, round 2 now collects and refines
    extended = coevolve(tiny(base_policy, run, resume=True, rounds=3, guard=anything))
    assert extended["rounds"][:2] == results["rounds"][:2] and extended["rounds"][3]["round"] == 3
    assert extended["rounds"][3]["accepted"]  # judged by the new settings, which accept anything
    assert extended["real_budget"] == 6 and extended["rounds"][3]["real_episodes_used"] == 6
    assert (run / "round_2" / "wm" / "world_model").is_dir() and not (run / "round_3" / "data.h5").exists()
    assert json.loads((run / "state.json").read_text())["config"]["rounds"] == 3


@pytest.mark.slow
def test_frozen_world_model_and_direct_rl_spend_their_budgets(base_policy, tmp_path):
    frozen = coevolve(tiny(base_policy, tmp_path / "frozen", frozen_world_model=True, videos=0,
                           imagination=ImaginationConfig(horizon=3, reward_type="dense", rung="sim-seeded")))
    assert frozen["real_budget"] == 2 and not (tmp_path / "frozen" / "round_1" / "data.h5").exists()
    # RL saw the dense reward: shaping in (0, 1) per step, so a return of 3 imagined steps is no whole
    # number (objects seeded at the recorded state: an untrained detector could put the cube anywhere)
    assert frozen["ablation"]["imagination"]["reward_type"] == "dense"
    returns = [json.loads(line)["episode/return"] for line in
               (tmp_path / "frozen" / "round_1" / "rl" / "metrics.jsonl").read_text().splitlines()
               if "episode/return" in line]
    assert returns and all(0 < r < 3 and r != round(r) for r in returns)
    assert frozen["rounds"][2]["world_model"] == frozen["rounds"][0]["world_model"]
    direct = coevolve(tiny(base_policy, tmp_path / "direct", mode="direct-rl"))
    with pytest.raises(ValueError, match="only a co-evolution run's rounds may grow"):  # its budget is spent
        coevolve(tiny(base_policy, tmp_path / "direct", mode="direct-rl", rounds=3, resume=True))
    assert [r["round"] for r in direct["rounds"]] == [0, 1]
    assert [r["real_episodes_used"] for r in direct["rounds"]] == [0, 4] and "imagined" not in direct["rounds"][1]
    # the baseline learns from none of the episodes co-evolution collects, so its RL gets all of
    # them (2 collections of 2 episodes of up to 100 steps), and it collects nothing itself
    assert direct["rounds"][1]["rl"]["env_steps"] >= 4 * 100
    assert not (tmp_path / "direct" / "round_0" / "data.h5").exists()
    # an ablation that adopts another run's round 0 starts from its evaluation, and reports only
    # the time of the stages it ran itself
    adopted = coevolve(tiny(base_policy, tmp_path / "adopted", mode="direct-rl", round0_from=tmp_path / "frozen",
                            videos=0))
    assert adopted["rounds"][0]["real"] == frozen["rounds"][0]["real"]
    stages = json.loads((tmp_path / "adopted" / "state.json").read_text())["stages"]
    own = [stage["seconds"] for stage in stages.values() if "adopted_from" not in stage]
    assert 0 < len(own) < len(stages) and adopted["wall_clock_s"] == pytest.approx(sum(own), abs=0.1)


def test_guard_rolls_back_exploitation_and_regressions():
    config = GuardConfig(divergence_threshold=0.3, max_real_drop=0.1)

    def result(real, imagined):
        return {"real": {"success_rate": real}, "imagined": {"success_rate": imagined}}

    assert guard([result(0.5, 0.5)], result(0.6, 0.8), config)["accepted"]
    exploit = guard([result(0.5, 0.5)], result(0.5, 0.9), config)
    assert not exploit["accepted"] and "imagined success exceeds real" in exploit["reasons"][0]
    worse = guard([result(0.5, 0.5)], result(0.3, 0.4), config)
    assert not worse["accepted"] and "0.30 fell more than 0.1 below the best so far (0.50)" in worse["reasons"][0]
    # a slow slide: each round within max_real_drop of the last, but not of the best
    slide = guard([result(0.67, 0.2), result(0.62, 0.2)], result(0.56, 0.3), config)
    assert not slide["accepted"] and "(0.67)" in slide["reasons"][0]


def test_bad_settings_are_refused(base_policy, tmp_path):
    with pytest.raises(ValueError, match="real_episodes=0"):
        tiny(base_policy, tmp_path, real_episodes=0)
    with pytest.raises(ValueError, match="keyframe_ratio"):
        tiny(base_policy, tmp_path, imagination=ImaginationConfig(keyframe_ratio=1.5))
    with pytest.raises(ValueError, match="max_real_drop=2"):
        tiny(base_policy, tmp_path, guard=GuardConfig(max_real_drop=2))
    with pytest.raises(ValueError, match="coevolve trains its own world model"):
        tiny(base_policy, tmp_path, imagination=ImaginationConfig(world_model=tmp_path, keyframes=tmp_path))
    with pytest.raises(ValueError, match="test_episodes=-1 must be an int >= 0"):
        tiny(base_policy, tmp_path, test_episodes=-1)
    with pytest.raises(ValueError, match="at least one episode"):
        CoevolveConfig(base_policy=base_policy, suite="tabletop-4", real_episodes=3)
    with pytest.raises(KeyError):
        tiny(base_policy, tmp_path, task="NoSuchTask-v0")
    with pytest.raises(ValueError, match="rl.kl_coef=0.1 is GRPO's KL term; rl.algo='ppo' has none"):
        RLRounds(kl_coef=0.1, algo="ppo")
    with pytest.raises(ValueError, match="rl.kl_coef=-1.0 must be a finite number >= 0"):
        RLRounds(kl_coef=-1.0)
    with pytest.raises(ValueError, match="wm.refine_steps=0 must be an int >= 1"):
        WorldModelRounds(refine_steps=0)
    with pytest.raises(ValueError, match="wm.preset='huge'; allowed: tiny, base, video-tiny, video-base"):
        WorldModelRounds(preset="huge")
    with pytest.raises(ValueError, match="rl.num_envs=3 must be a multiple of the 4 tasks"):
        CoevolveConfig(base_policy=base_policy, rl=RLRounds(num_envs=3))


def test_the_parts_pass_their_settings_on(tmp_path):
    from worldsim.training.grpo import GRPOConfig
    from worldsim.training.ppo import PPOConfig

    rl = RLRounds(env_steps=64, num_envs=8, group_size=4, lr=1e-4, kl_coef=0.05, time_budget=30.0)
    grpo = rl.train_config(128, task="PushCube-v0", out=tmp_path / "rl", seed=3)
    assert isinstance(grpo, GRPOConfig)
    assert (grpo.num_envs, grpo.group_size, grpo.lr, grpo.kl_coef, grpo.total_env_steps, grpo.time_budget,
            grpo.seed) == (8, 4, 1e-4, 0.05, 128, 30.0, 3)
    ppo = RLRounds(algo="ppo", num_envs=8, lr=2e-4).train_config(64, task="PushCube-v0", out=tmp_path / "ppo")
    assert isinstance(ppo, PPOConfig) and (ppo.num_envs, ppo.lr, ppo.total_env_steps) == (8, 2e-4, 64)
    wm = WorldModelRounds(preset="base", steps=40, refine_steps=12, time_budget=5.0)
    (tmp_path / "d.h5").write_bytes(b"")
    first = wm.train_config(tmp_path / "d.h5", tmp_path / "wm", None, 7, device="cpu")
    refined = wm.train_config(tmp_path / "d.h5", tmp_path / "wm2", tmp_path / "wm", 8, device="cpu")
    assert first.preset == "base" and first.architecture.frames.channels == (128, 256, 256)
    assert (first.steps, first.val_every, first.checkpoint_every, first.time_budget, first.seed) == (40, 10, 40, 5.0, 7)
    assert (refined.steps, refined.init, refined.seed) == (12, tmp_path / "wm", 8)


def test_round0_is_adopted_only_from_a_run_with_the_same_world_model_part(base_policy, tmp_path):
    from worldsim.pipelines.coevolve_stages import Stages

    def recorded(out, **kwargs):
        out.mkdir()
        stages = Stages(out, to_jsonable(tiny(base_policy, out, **kwargs)), resume=False)
        stages.state["stages"] = {"round 0: train world model": {"seconds": 1.0},
                                  "round 0: evaluate": {"seconds": 1.0}}
        (out / "round_0").mkdir()
        (out / "state.json").write_text(json.dumps(stages.state))
        return stages

    source = recorded(tmp_path / "source", wm=WorldModelRounds(steps=2, refine_steps=2))
    other = Stages(tmp_path / "other", to_jsonable(tiny(base_policy, tmp_path / "other",
                                                        wm=WorldModelRounds(steps=3, refine_steps=2))), False)
    with pytest.raises(ValueError, match="was run with other wm.steps: its round 0 is not this run's"):
        other.adopt_round0(tmp_path / "source", tmp_path / "other" / "round_0")
    # what comes after round 0 (refinements, RL) may differ
    later = dict(wm=WorldModelRounds(steps=2, refine_steps=5), rl=RLRounds(env_steps=3, num_envs=2, group_size=2))
    (tmp_path / "same").mkdir()
    same = Stages(tmp_path / "same", to_jsonable(tiny(base_policy, tmp_path / "same", **later)), False)
    same.adopt_round0(tmp_path / "source", tmp_path / "same" / "round_0")
    assert set(same.state["stages"]) == set(source.state["stages"]) and (tmp_path / "same" / "round_0").is_dir()


def test_nested_parts_are_config_file_tables_with_one_line_errors(tmp_path, capsys):
    from worldsim.commands.cli import load, main
    from worldsim.commands.parsing import parse

    def one_line_error(*needles):
        error = capsys.readouterr().err
        assert error.startswith("error: ") and error.count("\n") == 1, error
        assert all(needle in error for needle in needles), error

    parts = write_toml(tmp_path / "parts.toml", """
        [wm]
        steps = 9

        [rl]
        env_steps = 640
        group_size = 4
        algo = "ppo"
        """)
    config = parse(load("coevolve"), ["--base-policy", "p", "--task", "PushCube-v0", "--config-file", str(parts)],
                   "worldsim coevolve")
    assert config.wm == WorldModelRounds(steps=9) and config.rl == RLRounds(algo="ppo", env_steps=640, group_size=4)
    quick = parse(load("quickstart"), ["--config-file", str(write_toml(tmp_path / "lr.toml", "[rl]\nlr = 1e-4\n"))],
                  "worldsim quickstart")
    assert quick.rl == RLRounds(env_steps=12_800, num_envs=32, group_size=8, lr=1e-4)
    assert quick.wm == WorldModelRounds(steps=800)
    zero = write_toml(tmp_path / "zero.toml", "[rl]\nenv_steps = 0\n")
    assert main(["coevolve", "--base-policy", "p", "--task", "PushCube-v0", "--config-file", str(zero),
                 "--out", str(tmp_path / "co")]) == 2
    one_line_error("rl.env_steps=0 must be an int >= 1", "zero.toml")
    negative = write_toml(tmp_path / "negative.toml", "[wm]\ntime_budget = -1\n")
    assert main(["quickstart", "--config-file", str(negative), "--out", str(tmp_path / "q")]) == 2
    one_line_error("wm.time_budget=-1.0 must be a finite number > 0 (or None) (seconds)")
    # the quickstart sets what it does not let a user choose (its one round runs GRPO, refines nothing)
    for table, setting in (("rl", 'algo = "ppo"'), ("wm", "refine_steps = 5")):
        own = write_toml(tmp_path / "own.toml", f"[{table}]\n{setting}\n")
        assert main(["quickstart", "--config-file", str(own), "--out", str(tmp_path / "q")]) == 2
        one_line_error(f"{table}.{setting.split()[0]} is set by the command itself")
    # the parts are no flags, dotted or not
    for flag in ("--wm-steps", "--wm.steps", "--rl.env-steps"):
        assert main(["coevolve", "--base-policy", "p", flag, "3"]) == 2
        one_line_error(f"unrecognized options: {flag}")
    assert not (tmp_path / "co").exists() and not (tmp_path / "q").exists()


def test_quickstart_refuses_bad_values_before_running(tmp_path):
    from worldsim.commands.cli import main

    assert main(["quickstart", "--demos", "0", "--out", str(tmp_path / "q")]) == 2
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "something").write_text("x")
    assert main(["quickstart", "--out", str(tmp_path / "q")]) == 2  # not empty: --resume or a new --out
    assert main(["quickstart", "--task", "NoSuchTask-v0", "--out", str(tmp_path / "r")]) == 2


def test_direct_rl_makes_as_many_policy_updates_as_the_imagination_rounds():
    """GRPO's passes per iteration for the direct-rl baseline: its real budget gives it fewer
    iterations than imagination's steps do, so it makes more passes over each (never fewer than
    the trainer's default)."""
    def config(**changes):
        return CoevolveConfig(**{"base_policy": "bc", "task": "PushCube-v0", "real_episodes": 10, "rounds": 2,
                                 "mode": "direct-rl", "rl": RLRounds(env_steps=12_800, num_envs=32), **changes})

    # imagination: 2 rounds x ceil(12,800 / (40 steps x 32 envs)) = 20 iterations of 4 passes; physics: the
    # 20 real episodes of up to 100 steps are one iteration of 32 episodes, so it makes 80 passes over it
    assert get_task("PushCube-v0").max_episode_steps == 100
    assert direct_rl_epochs(config(), chunk=4) == 80
    # with episodes to the time limit, 2 x ceil(12,800 / 3,200) = 8 iterations of 4 passes
    assert direct_rl_epochs(config(imagination=ImaginationConfig(horizon=None)), chunk=4) == 32
    assert direct_rl_epochs(config(real_episodes=2_000), chunk=4) == 4  # more real iterations: the default
