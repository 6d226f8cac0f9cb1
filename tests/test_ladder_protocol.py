"""The imagination ladder's controls (benchmarks/imagination_ladder.py): every co-evolution arm
has its placebo where the model has a pathway to switch off, the headline rewards success alone,
readings are chosen on the round evaluations, and a changed protocol is refused."""

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmark scripts
import imagination_ladder as ladder  # noqa: E402


@pytest.fixture(autouse=True)
def results_elsewhere(tmp_path, monkeypatch):
    """Every result and kept record a test's run writes goes to its own folder, not the repository's."""
    monkeypatch.setattr(ladder, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(ladder, "STUDY_RESULTS", tmp_path / "results")
    monkeypatch.setattr(ladder, "SEED_RECORDS", tmp_path / "records")


def arms(*rungs, rewards=("transition", "dense")):
    parser = argparse.ArgumentParser()
    return ladder.arms_of(parser, argparse.Namespace(rungs=list(rungs), rewards=list(rewards)))


def test_every_arm_has_its_placebo_and_reuses_the_first_arm_s_round_0():
    found = {arm.name: arm for arm in arms("pixels", "video", "sim-seeded")}
    assert list(found) == ["pixels", "pixels~static", "pixels+dense", "pixels+dense~static", "video",
                           "sim-seeded", "sim-seeded~static", "sim-seeded+dense", "sim-seeded+dense~static"]
    assert found["pixels"].round0 is None and found["video"].round0 is None  # each trains its own world model
    assert {found[n].round0 for n in ("pixels~static", "pixels+dense", "sim-seeded", "sim-seeded+dense~static")} \
        == {"pixels"}
    assert found["pixels+dense~static"].imagination.placebo == "static"
    assert found["pixels+dense"].imagination.reward_type == "dense" and found["pixels"].imagination.placebo is None
    # the video rung: no object pathway to hold still, and no dense reward (it reads the objects)
    assert "video~static" not in found and "video+dense" not in found


def test_the_headline_rewards_success_alone(capsys):
    with pytest.raises(SystemExit) as caught:
        arms("pixels", rewards=("dense", "transition"))
    assert caught.value.code == 2
    assert "the first is the headline's and must reward success alone (transition or sparse)" in capsys.readouterr().err


def test_the_reading_is_the_one_the_round_evaluations_rank_first():
    assert ladder.chosen({"mean": 0.3, "sampled": 0.4}) == "sampled"
    assert ladder.chosen({"mean": 0.4, "sampled": 0.4}) == "mean"  # a tie: the mean action


def test_held_out_episodes_are_read_as_asked_and_collected_once(tmp_path, monkeypatch):
    import worldsim.data.collect as collect
    import worldsim.policies as policies

    calls = []

    def fake_collect(tasks, factory, episodes, out, **settings):
        calls.append(settings["deterministic"])
        Path(out).write_bytes(b"")

    monkeypatch.setattr(collect, "collect_episodes", fake_collect)
    monkeypatch.setattr(policies, "load_policy", lambda path: type("P", (), {"eval": lambda self: self})())
    for reading in ("mean", "sampled", "mean"):  # the third call finds its file
        path = ladder.heldout_episodes(tmp_path / "bc", "PushCube-v0", 60, tmp_path, 3, reading)
        assert path == tmp_path / f"heldout_{reading}.h5"
    assert calls == [True, False]  # the mean action is the deterministic reading


def test_a_changed_protocol_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    (tmp_path / "protocol.json").write_text(json.dumps({"task": "PushCube-v0", "test_episodes": 100}))
    monkeypatch.setattr(sys, "argv", ["imagination_ladder.py", "--out", str(tmp_path), "--test-episodes", "200"])
    monkeypatch.setattr(ladder, "run_seed", lambda *a: pytest.fail("a seed ran under a changed protocol"))
    with pytest.raises(SystemExit) as caught:
        ladder.main()
    assert caught.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "was started with another protocol (" in error and "test_episodes" in error
    assert error.endswith("a changed protocol is a new run, with a new --out and a new --test-seed")


def seeds_run(out, monkeypatch, *extra):
    """The seeds ``ladder.main()`` runs from now on (nothing trained), with ``--out out`` and ``extra``."""
    argv = ["imagination_ladder.py", "--out", str(out), "--seeds", "0", "--rewards", "transition", *extra]
    monkeypatch.setattr(sys, "argv", argv)
    ran = []
    monkeypatch.setattr(ladder, "run_seed", lambda *a: ran.append(a[-1]))
    monkeypatch.setattr(ladder, "report", lambda *a: None)
    return ran


def test_a_changed_preset_is_a_changed_protocol(tmp_path, monkeypatch, capsys):
    ran = seeds_run(tmp_path, monkeypatch)
    ladder.main()  # the protocol written, with the preset's settings; the same arguments run again
    kept = json.loads((tmp_path / "protocol.json").read_text())
    assert kept["presets"]["tiny"]["objects"] == {"clear": True, "clear_arm": True, "paste": False}
    ladder.main()
    assert ran == [0, 0]
    monkeypatch.setitem(ladder.PRESETS, "tiny", ladder.PRESETS["tiny"] | {"objects": {"clear": True}})
    with pytest.raises(SystemExit):
        ladder.main()  # the model the folder's runs were built with is not the one the preset builds now
    assert "another protocol (presets)" in capsys.readouterr().err
    assert ran == [0, 0]


def test_a_folder_from_before_collect_was_collected_sampled(tmp_path, monkeypatch, capsys):
    ran = seeds_run(tmp_path, monkeypatch)
    ladder.main()
    kept = json.loads((tmp_path / "protocol.json").read_text())
    assert kept["collect"] == "sampled" and kept["rl_group_size"] == 8
    del kept["collect"], kept["rl_group_size"]  # as written before the arguments existed
    (tmp_path / "protocol.json").write_text(json.dumps(kept))
    ladder.main()  # the same protocol: such a folder's rounds collected with sampled actions, in groups of 8
    assert ran == [0, 0]
    for flag, value in (("--collect", "tested"), ("--rl-group-size", "16")):
        refused = seeds_run(tmp_path, monkeypatch, flag, value)
        with pytest.raises(SystemExit):
            ladder.main()
        assert f"another protocol ({flag[2:].replace('-', '_')})" in capsys.readouterr().err
        assert ran == [0, 0] and refused == []
    # a group size that does not divide the envs: refused before anything is written
    refused = seeds_run(tmp_path / "g", monkeypatch, "--rl-group-size", "12")
    with pytest.raises(SystemExit):
        ladder.main()
    assert capsys.readouterr().err.strip().endswith("--rl-group-size 12: give at least 2, dividing --rl-num-envs 32")
    assert refused == [] and not (tmp_path / "g").exists()


def written_results(tmp_path, monkeypatch):
    """What ``ladder.main()`` reports, by result name, with both result folders in ``tmp_path``."""
    written = {}

    def report(name, metrics, args, folder):
        written[name] = metrics
        (folder / f"{name}.json").write_text(json.dumps({"metrics": metrics}))

    monkeypatch.setattr(ladder, "run_seed", lambda *a: None)
    monkeypatch.setattr(ladder, "report", report)
    monkeypatch.setattr(ladder, "RESULTS", tmp_path)
    monkeypatch.setattr(ladder, "STUDY_RESULTS", tmp_path)
    return written


def kept_record(seed, bc, pixels):
    """A tested seed's record as ``run_seed`` keeps it: BC, direct RL (as BC), the pixels arm and its
    untrained static placebo (the base's outcomes)."""
    def arm(outcomes, **run):
        return {"round_eval": {"mean": 0.5, "sampled": 0.4}, "reading": "mean",
                "test": {"mean": outcomes, "sampled": [False] * len(outcomes)}, "policy": "p"} | run

    run = {"accepted": True, "wall_clock_s": 10.0, "real_episodes": 300, "rl": {"policy_updates": 40}}
    return {"seed": seed, "direct_rl": "direct-rl@3e-05", "fidelity": {}, "heldout_reading": "mean",
            "collect_reading": "sampled", "direct_rl_updates": {"direct-rl@3e-05": 40},
            "aids": {"pixels": ["the simulator's state as training supervision"],
                     "pixels~static": ["the simulator's state as training supervision"]},
            "arms": {"bc": arm(bc), "direct-rl@3e-05": arm(bc, **run), "pixels": arm(pixels, **run),
                     "pixels~static": arm(bc, trained=False, accepted=False, wall_clock_s=0.0, real_episodes=0,
                                          rl={"policy_updates": 0})}}


def test_seeds_tested_in_separate_sittings_are_gathered_from_their_kept_records(tmp_path, monkeypatch, capsys):
    written = written_results(tmp_path, monkeypatch)
    (tmp_path / "imagination_ladder.json").write_text(json.dumps({"metrics": {"tasks": {"PickPlaceCube-v0": {}}}}))
    outcomes = {0: ([True, False, False, False], [True, True, False, False]),
                1: ([False, False, True, False], [True, False, True, True])}

    def run_seed(args, arms, steps, seed):  # what a sitting leaves in the repository: the kept record
        assert [arm.name for arm in arms] == ["pixels", "pixels~static"]
        (ladder.kept_records(args) / f"seed_{seed}.json").write_text(json.dumps(kept_record(seed, *outcomes[seed])))

    monkeypatch.setattr(ladder, "run_seed", run_seed)
    argv = ["imagination_ladder.py", "--seeds", "0", "1", "--rewards", "transition", "--test-episodes", "4"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path / "first"), "--only-seeds", "0"])
    ladder.main()
    kept = tmp_path / "records" / "PushCube-v0_test40000"
    assert json.loads((kept / "protocol.json").read_text())["rewards"] == ["transition"]  # before any test
    assert written == {} and "waiting for seeds [1]" in capsys.readouterr().out  # the standing figures stay
    # another sitting, its run folder new: the first seed is read from its kept record
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path / "second"), "--only-seeds", "1"])
    ladder.main()
    tasks = written["imagination_ladder"]["tasks"]
    assert sorted(tasks) == ["PickPlaceCube-v0", "PushCube-v0"]  # the other task's entry is kept
    entry = tasks["PushCube-v0"]
    assert entry["protocol"]["test_seed"] == 40_000 and entry["run"]["machine"]
    pixels, placebo = entry["rungs"]["pixels"], entry["rungs"]["pixels~static"]
    assert pixels["per_seed_gain_vs_bc"] == [25.0, 50.0] and pixels["gain_vs_placebo"] == 37.5
    assert pixels["aids"] == ["the simulator's state as training supervision"]
    assert placebo["gain_vs_bc"] == 0.0 and placebo["not_trained"].startswith("a static world pays")
    assert "not_trained" not in pixels
    # the same test seed under another protocol: refused before anything runs
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path / "third"), "--rounds", "2"])
    monkeypatch.setattr(ladder, "run_seed", lambda *a: pytest.fail("a seed ran on another protocol's episodes"))
    with pytest.raises(SystemExit):
        ladder.main()
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "--test-seed 40000's episodes belong to another protocol (rounds): a changed protocol is a new run, with a "
        "new --out and a new --test-seed")


def test_only_runs_names_a_seed_s_runs(tmp_path, monkeypatch, capsys):
    for bad, message in ((["pixels+dense"], "--only-runs pixels+dense: give some of direct-rl@1e-05, "
                                            "direct-rl@3e-05, direct-rl@0.0001, pixels, pixels~static"),
                         (["pixels", "--collect", "tested"], "--only-runs with --collect tested")):
        ran = seeds_run(tmp_path / "o", monkeypatch, "--only-runs", *bad)
        with pytest.raises(SystemExit):
            ladder.main()
        assert message in capsys.readouterr().err and ran == []
    ran = seeds_run(tmp_path / "o", monkeypatch, "--only-runs", "pixels")
    ladder.main()  # the runs only: nothing gathered, a pointer to the run that tests
    assert ran == [0] and "a run without --only-runs measures and tests" in capsys.readouterr().out


def test_model_changes_are_read_as_config_tables():
    assert ladder.model_changes(["judge.heights=true", "proprio.sees_cubes = true", "frames.channels=[8, 16]"]) \
        == {"judge": {"heights": True}, "proprio": {"sees_cubes": True}, "frames": {"channels": [8, 16]}}
    for bad in ("heights=true", "judge.heights", "judge.heights=yes"):
        with pytest.raises(ValueError, match="give TABLE.FIELD=VALUE"):
            ladder.model_changes([bad])


def test_a_run_with_model_changes_keeps_its_records_and_entry_apart(tmp_path, monkeypatch, capsys):
    written = written_results(tmp_path, monkeypatch)
    for folder in ("standing", "studies"):
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(ladder, "RESULTS", tmp_path / "standing")
    monkeypatch.setattr(ladder, "STUDY_RESULTS", tmp_path / "studies")
    monkeypatch.setattr(ladder, "run_seed", lambda args, arms, steps, seed: (
        ladder.kept_records(args) / f"seed_{seed}.json").write_text(json.dumps(kept_record(seed, [True], [True]))))
    changes = ["proprio.sees_cubes=true", "judge.heights=true"]
    argv = ["imagination_ladder.py", "--seeds", "0", "--rewards", "transition", "--test-episodes", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path / "v"), "--task", "PickPlaceCube-v0",
                                      "--wm-model", *changes])
    ladder.main()
    assert list(written) == [ladder.VARIANTS]  # the standing result is left as it was
    entry = written[ladder.VARIANTS]["tasks"]["PickPlaceCube-v0 judge.heights=true proprio.sees_cubes=true"]
    assert entry["protocol"]["wm_model"] == changes
    kept = tmp_path / "records"  # named by the entry: the variant's records apart from the standing ones
    assert [f.name for f in kept.iterdir()] == ["PickPlaceCube-v0_judge.heights=true_proprio.sees_cubes=true_test40000"]
    assert (next(kept.iterdir()) / "seed_0.json").exists()
    # a field the model does not have, or a change its preset cannot take: refused before anything runs
    for bad, message in ((["judge.height=true"], "unknown setting(s) height in [judge]"),
                         (["objects=false"], "objects")):
        monkeypatch.setattr(sys, "argv", ["imagination_ladder.py", "--out", str(tmp_path / "w"), "--wm-model", *bad])
        with pytest.raises(SystemExit):
            ladder.main()
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith("imagination_ladder.py: error: --wm-model ") and message in error
    assert not (tmp_path / "w").exists()
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path / "b"), "--rl-env-steps", "51200",
                                      "--variant", "budget-51k"])
    ladder.main()  # another budget, named a variant: its own entry, the standing result still untouched
    assert list(written) == [ladder.VARIANTS]
    entry = written[ladder.VARIANTS]["tasks"]["PushCube-v0 budget-51k"]
    assert entry["protocol"]["rl_env_steps"] == 51200 and entry["protocol"]["variant"] == "budget-51k"


def test_outcome_agreement_is_averaged_over_seeds_with_both_outcomes():
    def seed(psnr, agreement, successes):
        return {"psnr_8": psnr, "agreement_full": agreement, "physics_full_1mm": agreement, "action_gap_8": None,
                "judge": "rule", "heldout": {"successes": successes, "failures": 60 - successes}}

    # a policy that never succeeded on its held-out episodes: the judge's "always failure" scores 100%
    means = ladder.fidelity_means([seed(27.0, 1.0, 0), seed(28.0, 0.6, 12), seed(29.0, 0.5, 30)])
    assert means["psnr_8"] == pytest.approx(28.0)  # frames: every seed
    assert means["agreement_full"] == pytest.approx(0.55) and means["physics_full_1mm"] == pytest.approx(0.55)
    assert means["agreement_seeds"] == 2 and means["action_gap_8"] is None and means["judge"] == "rule"
    assert ladder.fidelity_means([seed(27.0, 1.0, 0)])["agreement_full"] is None


def ladder_run(folder, seeds, arms, test_seed=90_000, wm_model=()):
    """A tested ladder folder: its protocol and each seed's record (``arms``: name -> outcomes a
    seed; direct RL's chosen run succeeds where BC does)."""
    folder.mkdir()
    protocol = {"task": "PickPlaceCube-v0", "seeds": seeds, "test_seed": test_seed, "test_episodes": 4,
                "wm_model": list(wm_model)}
    (folder / "protocol.json").write_text(json.dumps(protocol))
    for seed in seeds:
        record = {"direct_rl": "direct-rl@3e-05",
                  "arms": {name: {"reading": "mean", "test": {"mean": outcomes[seed], "sampled": [False] * 4}}
                           for name, outcomes in (arms | {"direct-rl@3e-05": arms["bc"]}).items()}}
        (folder / f"seed_{seed}.json").write_text(json.dumps(record))
    return folder


def test_two_ladder_runs_are_compared_arm_by_arm_on_the_same_episodes(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
    import ladder_pairs

    bc = {0: [True, False, False, False], 1: [False, False, True, False]}
    plain = ladder_run(tmp_path / "plain", [0, 1], {"bc": bc, "pixels": {0: [True, False, False, False],
                                                                          1: [False, False, True, False]}})
    options = ladder_run(tmp_path / "carry", [0, 1], {"bc": bc, "pixels": {0: [True, True, False, False],
                                                                            1: [True, True, True, False]}},
                         wm_model=["judge.heights=true"])
    figures = ladder_pairs.compare(plain, options)
    assert figures["wm_model"] == [[], ["judge.heights=true"]]
    assert list(figures["arms"]) == ["pixels", "direct-rl"]  # the chosen direct-RL run, not the grid's
    assert figures["arms"]["direct-rl"]["gain"] == 0.0
    pixels = figures["arms"]["pixels"]
    assert pixels["per_seed"] == [25.0, 50.0] and pixels["gain"] == 37.5  # points, the second's over the first's
    assert pixels["first"]["success"] == 0.25 and pixels["second"]["success"] == 0.625
    other = ladder_run(tmp_path / "other", [0, 1], {"bc": bc, "pixels": bc}, test_seed=80_000)
    with pytest.raises(ValueError, match="not on the same test episodes: test_seed differ"):
        ladder_pairs.compare(plain, other)
    rebased = ladder_run(tmp_path / "rebased", [0, 1], {"bc": {0: bc[1], 1: bc[0]}, "pixels": bc})
    with pytest.raises(ValueError, match="seed 0: BC's test outcomes differ"):
        ladder_pairs.compare(plain, rebased)


def test_the_physics_ceiling_keeps_its_protocol_and_gathers_gains_over_bc(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
    import physics_ceiling

    written = {}
    monkeypatch.setattr(physics_ceiling, "STUDY_RESULTS", tmp_path)
    monkeypatch.setattr(physics_ceiling, "report", lambda name, metrics, args, folder: written.update({name: metrics}))
    bc = {0: [True, False, False, False], 1: [False, False, True, False]}
    grpo = {0: [True, True, False, False], 1: [True, False, True, False]}

    def run_seed(args, seed):
        arms = {"bc": bc[seed], "physics-sparse@12800": grpo[seed]}
        record = {"seed": seed, "arms": {name: {"reading": "mean", "test": {"mean": o, "sampled": [False] * 4},
                                                "iterations": 4} for name, o in arms.items()}}
        (args.out / f"seed_{seed}.json").write_text(json.dumps(record))

    monkeypatch.setattr(physics_ceiling, "run_seed", run_seed)
    command = ["physics_ceiling.py", "--seeds", "0", "1", "--budgets", "12800", "--out", str(tmp_path / "c")]
    monkeypatch.setattr(sys, "argv", command)
    physics_ceiling.main()
    metrics = written["physics_ceiling"]
    assert metrics["protocol"]["budgets"] == [12800] and "out" not in metrics["protocol"]
    arm = metrics["arms"]["physics-sparse@12800"]
    assert arm["gain_vs_bc"]["per_seed"] == [25.0, 25.0] and arm["success"] == 0.5 and arm["iterations"] == [4, 4]
    assert metrics["bc"]["success"] == 0.25
    monkeypatch.setattr(sys, "argv", [*command, "--lr", "1e-4"])  # another protocol in the same folder
    with pytest.raises(SystemExit):
        physics_ceiling.main()
    assert "holds another protocol" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", [*command[:-1], str(tmp_path / "d"), "--num-envs", "12"])
    with pytest.raises(SystemExit):
        physics_ceiling.main()
    assert "groups of --group-size 8 must divide it" in capsys.readouterr().err and not (tmp_path / "d").exists()
    # a protocol kept before the recipe was a flag reads as GRPO in groups of 8; another recipe is another protocol
    kept = json.loads((tmp_path / "c" / "protocol.json").read_text())
    (tmp_path / "c" / "protocol.json").write_text(json.dumps({k: v for k, v in kept.items()
                                                              if k not in ("algo", "group_size")}))
    monkeypatch.setattr(sys, "argv", command)
    physics_ceiling.main()
    monkeypatch.setattr(sys, "argv", [*command, "--algo", "ppo"])
    with pytest.raises(SystemExit):
        physics_ceiling.main()
    assert "another protocol (algo)" in capsys.readouterr().err


def test_physics_recipes_parse_their_fields_and_rank_recipes_on_validation(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
    import physics_recipes

    recipe = physics_recipes.parse_recipe("algo=grpo, num_envs=128,group_size=16,lr=1e-4")
    assert (recipe.algo, recipe.num_envs, recipe.group_size, recipe.lr) == ("grpo", 128, 16, 1e-4)
    assert physics_recipes.recipe_name(recipe) == "grpo-e128-g16-lr0.0001"
    assert physics_recipes.recipe_name(physics_recipes.parse_recipe("algo=ppo,lr=3e-5")) == "ppo-e64-lr3e-05"
    for text, message in (("lr=fast", "lr='fast' is not a float"), ("epochs=3", "'epochs=3' is not FIELD=VALUE"),
                          ("num_envs=30", "groups of 8 must divide num_envs=30"), ("algo=sac", "allowed: grpo, ppo")):
        with pytest.raises(ValueError, match=message):
            physics_recipes.parse_recipe(text)

    written = {}
    monkeypatch.setattr(physics_recipes, "report", lambda name, metrics, args, folder: written.update({name: metrics}))
    # BC is better sampled; recipe a gains 25 points by its mean action on both seeds, recipe b none
    validation = {"bc": ([False, False, True, False], [True, False, True, False]),
                  "grpo-e32-g8-lr3e-05": ([True, True, True, False], [False] * 4),
                  "grpo-e128-g8-lr3e-05": ([True, False, True, False], [True, False, True, False])}

    def run_seed(args, seed):
        record = {"seed": seed, "arms": {name: {"validation": {"mean": m, "sampled": s}, "iterations": 2}
                                         for name, (m, s) in validation.items()}}
        (args.out / f"seed_{seed}.json").write_text(json.dumps(record))

    monkeypatch.setattr(physics_recipes, "run_seed", run_seed)
    command = ["physics_recipes.py", "--seeds", "0", "1", "--out", str(tmp_path / "r"), "--recipes",
               "num_envs=32,lr=3e-5", "num_envs=128,lr=3e-5"]
    monkeypatch.setattr(sys, "argv", command)
    physics_recipes.main()
    metrics = written["physics_recipes"]
    assert list(metrics["protocol"]["recipes"]) == ["grpo-e32-g8-lr3e-05", "grpo-e128-g8-lr3e-05"]
    assert metrics["bc"]["readings"] == ["sampled", "sampled"] and metrics["bc"]["success"] == 0.5
    best = metrics["arms"]["grpo-e32-g8-lr3e-05"]
    assert best["readings"] == ["mean", "mean"] and best["per_seed"] == [25.0, 25.0] and best["iterations"] == [2, 2]
    assert metrics["ranked"] == ["grpo-e32-g8-lr3e-05", "grpo-e128-g8-lr3e-05"]
    monkeypatch.setattr(sys, "argv", [*command[:-2], "lr=3e-5", "lr=0.00003,num_envs=64"])
    with pytest.raises(SystemExit):
        physics_recipes.main()
    assert "name one recipe twice" in capsys.readouterr().err


def test_the_imagination_curve_reads_grpo_runs_and_gathers_seeds_against_bc(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
    import imagination_curve

    lines = [{"step": 2560, "episode/success_rate": 0.25}, {"step": 5120, "episode/success_rate": 0.75},
             {"step": 5120, "eval/success_rate": 0.5}, {"step": 7680, "episode/success_rate": 1.0},
             {"step": 7680, "eval/success_rate": 0.25}, {"step": 7680, "eval/success_rate": 0.25}]
    curve = imagination_curve.grpo_curve(lines)
    # each evaluation beside the imagined success since the one before; the trainer's final one has none new
    assert curve == [{"env_steps": 5120, "real": 0.5, "imagined": 0.5},
                     {"env_steps": 7680, "real": 0.25, "imagined": 1.0},
                     {"env_steps": 7680, "real": 0.25, "imagined": None}]

    written = {}
    monkeypatch.setattr(imagination_curve, "report",
                        lambda name, metrics, args, folder: written.update({name: metrics}))
    bc = {0: 0.25, 1: 0.5}

    def run_seed(args, seed):
        points = [{"env_steps": 100 * (i + 1), "real": bc[seed] + 0.25 * i, "imagined": 0.75, "accepted": i == 0}
                  for i in range(args.rounds)]
        (args.out / f"seed_{seed}.json").write_text(json.dumps(
            {"seed": seed, "bc": bc[seed], "curve": points, "train_seconds": 1.0}))

    monkeypatch.setattr(imagination_curve, "run_seed", run_seed)
    command = ["imagination_curve.py", "--rounds", "2", "--env-steps", "200", "--name", "curve",
               "--out", str(tmp_path / "c")]
    monkeypatch.setattr(sys, "argv", command)
    imagination_curve.main()
    metrics = written["curve"]
    assert metrics["protocol"]["rounds"] == 2 and "name" not in metrics["protocol"]
    assert metrics["curve"][1] == {"env_steps": 200, "real": [0.5, 0.75], "imagined": [0.75, 0.75],
                                   "accepted": [False, False], "real_minus_bc_points": 25.0}
    assert (tmp_path / "c" / "curve.png").stat().st_size > 0
    for flags, message in ((["--rounds", "3"], "must divide into --rounds 3 equal rounds"),
                           (["--wm-refine-steps", "1"], "another protocol (wm_refine_steps)")):
        monkeypatch.setattr(sys, "argv", [*command, *flags])
        with pytest.raises(SystemExit):
            imagination_curve.main()
        assert message in capsys.readouterr().err
    # a protocol kept before --rounds was a flag reads as one GRPO run
    one = ["imagination_curve.py", "--env-steps", "200", "--name", "curve", "--out", str(tmp_path / "one")]
    monkeypatch.setattr(sys, "argv", one)
    imagination_curve.main()
    kept = json.loads((tmp_path / "one" / "protocol.json").read_text())
    (tmp_path / "one" / "protocol.json").write_text(json.dumps({k: v for k, v in kept.items()
                                                                if k not in ("rounds", "wm_refine_steps")}))
    imagination_curve.main()
    assert written["curve"]["curve"][0]["real_minus_bc_points"] == 0.0
