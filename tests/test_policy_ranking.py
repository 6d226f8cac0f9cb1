"""The ranking benchmark's candidate sets (benchmarks/policy_ranking.py): BC checkpoints and GRPO
fine-tunes, where each is measured, how a fine-tune's training steps are counted, and the mixed
models' ring (every set ranked by a model fine-tuned on another set's policies, never on its own)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmark scripts
import policy_ranking  # noqa: E402


def test_each_set_is_ranked_by_the_model_of_the_set_before_it_in_the_ring():
    args = policy_ranking.Args(mixed_ring=(21, 22, 23))
    assert {s: policy_ranking.mixed_source(args, s) for s in (21, 22, 23)} == {21: 23, 22: 21, 23: 22}
    pair = policy_ranking.Args(mixed_ring=(5, 9))
    assert policy_ranking.mixed_source(pair, 5) == 9 and policy_ranking.mixed_source(pair, 9) == 5


@pytest.mark.parametrize("ring", [(21,), (21, 22, 21)])
def test_a_ring_that_would_rank_a_set_by_its_own_policies_is_refused(ring, tmp_path):
    with pytest.raises(SystemExit, match="at least two distinct sets"):
        policy_ranking.main(policy_ranking.Args(sets=(), mixed_ring=ring, out=tmp_path))


def test_a_set_holds_every_bc_checkpoint_then_every_fine_tunes_kept_iterations(tmp_path):
    args = policy_ranking.Args(out=tmp_path, checkpoints=(1200, 2000), rl_from=("bc_a", "bc_small"),
                               rl_lrs=(3e-5, 1e-4), rl_iterations=(3, 6))
    names = [f"{p.parent.name}/{p.name}" for p in policy_ranking.candidates(args, 21)]
    assert len(names) == 4 * 2 + 2 * 2 * 2 and len(set(names)) == len(names)
    assert names[:2] == ["bc_a/policy_step1200", "bc_a/policy_step2000"]
    assert names[8:] == [f"grpo_{base}_lr{lr}/policy_iter{n}" for base in ("bc_a", "bc_small")
                         for lr in ("3e-05", "0.0001") for n in (3, 6)]
    assert policy_ranking.candidates(args, 21)[0].parent.parent == tmp_path / "set21"
    kept = tmp_path / "set21" / "grpo_bc_a_lr3e-05" / "policy_iter3"
    assert policy_ranking.measured_path(kept) == kept.parent / "ranking_iter3.json"
    assert policy_ranking.measured_path(kept, "_mixed") == kept.parent / "ranking_iter3_mixed.json"
    assert len(policy_ranking.candidates(policy_ranking.Args(rl_from=()), 21)) == 4 * 3


def test_a_fine_tune_of_an_unknown_run_is_refused():
    with pytest.raises(SystemExit, match="--rl-from bc_c: not a BC run; choose from bc_a, bc_b, bc_small, bc_low_lr"):
        policy_ranking.rl_runs(policy_ranking.Args(rl_from=("bc_a", "bc_c")))


def test_the_benchmarks_tasks_are_its_suites():
    from worldsim.envs.tasks import get_suite

    assert policy_ranking.TASKS == tuple(get_suite(policy_ranking.SUITE).seen)


def test_a_fine_tunes_updates_count_each_iterations_passes_times_its_minibatches(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_minibatches": 4}))
    rows = [{"step": 100 * i, "early_stop_epoch": epochs} for i, epochs in enumerate((4, 1, 2), start=1)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [{"step": 0, "x": 1.0}, *rows]))
    assert [policy_ranking.updates_until(tmp_path, n) for n in (1, 2, 3)] == [16, 20, 28]
    with pytest.raises(SystemExit, match="logged 3 iterations, fewer than 4"):
        policy_ranking.updates_until(tmp_path, 4)


def test_a_fine_tune_runs_afresh_only_when_a_kept_iteration_is_missing(tmp_path, monkeypatch):
    import types

    import worldsim.policies
    import worldsim.training.grpo
    from worldsim.envs.tasks import get_task

    runs = []
    monkeypatch.setattr(worldsim.training.grpo, "train_grpo", runs.append)
    monkeypatch.setattr(worldsim.policies, "load_policy", lambda path: types.SimpleNamespace(chunk_size=4))
    args = policy_ranking.Args(rl_iterations=(3, 9))
    out = tmp_path / "grpo_bc_a_lr3e-05"
    for n in (3, 9):
        (out / f"policy_iter{n}").mkdir(parents=True)
    policy_ranking.fine_tune(args, tmp_path / "policy", out, 3e-5, 21)
    assert runs == []
    policy_ranking.fine_tune(policy_ranking.Args(rl_iterations=(3, 9, 20)), tmp_path / "policy", out, 3e-5, 21)
    (config,) = runs
    assert config.out == out and config.overwrite and config.keep_checkpoints and config.checkpoint_every == 1
    episode = max(get_task(task).max_episode_steps for task in policy_ranking.TASKS)
    assert config.total_env_steps == 20 * worldsim.training.grpo.iteration_steps(episode, 4, args.rl_num_envs)
