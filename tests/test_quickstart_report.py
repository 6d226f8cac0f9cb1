"""The quickstart's report.md says what a careful reader needs: budgets (and cuts), the paired
verdict with intervals, world-model fidelity beside base rates, detection, links to media."""

import copy
import json

from worldsim.pipelines.quickstart_report import budget_lines, write_report

SUMMARY = {
    "task": "PushCube-v0", "seed": 0, "torch_threads": 2, "demos": 20,
    "timings_s": {"behaviour cloning": 12.5, "failure detection": 3.0}, "wall_clock_s": 15.5,
    "budgets": {"bc": {"steps": 50, "asked": 50, "stopped_by": "steps"},
                "world_model": {"steps": 20, "asked": 20, "stopped_by": "steps"},
                "grpo": {"env_steps": 3200, "asked": 600, "stopped_by": "steps"}},
    "bc_loss": {"train": 0.4749, "val": 0.5284},
    "comparison": {"episodes": 200, "before": {"success_rate": 0.445, "ci95": [0.376, 0.516]},
                   "after": {"success_rate": 0.485, "ci95": [0.415, 0.556]},
                   "only_after_succeeded": 20, "only_before_succeeded": 12, "difference": 0.04,
                   "difference_ci95": [-0.015, 0.095], "p_value": 0.215, "significant": False},
    "bc_real_success": 0.445, "final_real_success": 0.485, "imagined_success": [0.3, 0.4],
    "world_model": {"held_out": {"episodes": 40, "successes": 20, "failures": 20, "near_miss_failures": 5,
                                 "base_rate": 0.5, "balanced": True},
                    "psnr_at_8": 24.3, "psnr_at_32": 21.7, "object_error_16_after_contact_cm": 3.06,
                    "agreement": {k: {"accuracy": 0.65, "balanced_accuracy": 0.64, "base_rate": 0.5}
                                  for k in ("last_16", "full")},
                    "physics_ceiling": {"exact": 1.0, "shift_0.1mm": 0.75, "shift_0.33mm": 0.65, "shift_1mm": 0.6}},
    "detectors_roc_auc": {"knn": 0.8}, "detection_skipped": None,
    "guard": {"accepted": False, "reasons": ["imagined success exceeds real by 0.46 > 0.3"]},
}


def test_report_states_the_paired_verdict_base_rates_and_links_every_media_file(tmp_path):
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("| detector | ROC-AUC |\n|---|---|\n| [knn](knn.png) | 0.80 |\n")
    (tmp_path / "fidelity").mkdir()
    (tmp_path / "fidelity" / "replay_0.mp4").write_bytes(b"\0")
    text = write_report(tmp_path, SUMMARY).read_text()
    assert "| BC (base) | 44.5% | 37.6% - 51.6% |" in text
    assert "+4.0 points" in text and "p = 0.21" in text and "not a significant difference" in text
    assert "base rate 50.0%, balanced" in text and "3.1 cm off (median)" in text
    assert "cube 0.1mm / 0.33mm / 1mm off, agrees 75.0% / 65.0% / 60.0%" in text
    assert "[knn](detect/knn.png)" in text and "- [fidelity/replay_0.mp4](fidelity/replay_0.mp4)" in text
    assert "| behaviour cloning | 12.5 |" in text and "Warning" not in text
    assert "rolled the GRPO policy back (imagined success exceeds real by 0.46 > 0.3)" in text
    assert json.loads((tmp_path / "summary.json").read_text())["comparison"]["episodes"] == 200


def test_a_stage_cut_by_its_time_budget_is_flagged_loudly():
    cut = copy.deepcopy(SUMMARY)
    cut["budgets"]["world_model"] = {"steps": 597, "asked": 800, "stopped_by": "time_budget"}
    lines = budget_lines(cut)
    assert "| world model | 597 steps | 800 | time_budget |" in lines
    assert "a time budget cut world_model short" in lines[-1]


def test_skipped_detection_says_why(tmp_path):
    skipped = copy.deepcopy(SUMMARY) | {"detectors_roc_auc": None,
                                        "detection_skipped": "the calibration set holds no successful rollouts"}
    text = write_report(tmp_path, skipped).read_text()
    assert "Skipped: the calibration set holds no successful rollouts" in text


def test_stages_say_what_they_gave(tmp_path):
    from worldsim.data.collect import collect_episodes
    from worldsim.pipelines.quickstart import _describe_fidelity, _describe_outcomes, _outcomes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

    data = tmp_path / "d.h5"
    collect_episodes(["ReachCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t)), 4, data, num_envs=4,
                     image_size=32, progress=False)
    wins = sum(_outcomes(data))
    assert _describe_outcomes(data) == f"4 episodes, {wins} successes ({100 * wins / 4:.1f}%)"
    fidelity = tmp_path / "fidelity.json"
    fidelity.write_text(json.dumps({"psnr_at_8": 24.31, "psnr_at_horizon": 21.66,
                                    "success_by_horizon": {"full": {"accuracy": 0.643, "base_rate": 0.5}}}))
    assert _describe_fidelity(fidelity) == ("PSNR 24.3 / 21.7 dB after 8 / 32 steps; outcome agreement over full "
                                            "replays 64% (base rate 50%)")


def test_counts_of_one_are_singular(tmp_path):
    one = copy.deepcopy(SUMMARY)
    one["world_model"]["held_out"] |= {"successes": 1, "failures": 39, "near_miss_failures": 1}
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("")
    text = write_report(tmp_path, one).read_text()
    assert "(1 success, 39 failures, 1 near miss;" in text


def test_the_quickstart_says_how_long_it_should_take_when_it_starts(tmp_path, capsys, monkeypatch):
    import pytest

    import worldsim.pipelines.quickstart as quickstart

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(quickstart, "expert_demonstrations", stop)
    with pytest.raises(KeyboardInterrupt):
        quickstart.quickstart(quickstart.QuickstartConfig(out=tmp_path / "q", torch_threads=1))
    said = " ".join(capsys.readouterr().out.split())
    assert f"quickstart: about 19 minutes on 2 quiet CPU cores (the default budgets take {quickstart.DEFAULT_MINUTES}" \
        in said
    longer = quickstart.QuickstartConfig(out=tmp_path / "r", wm_steps=1600)
    assert quickstart.estimate_minutes(longer) > quickstart.estimate_minutes(quickstart.QuickstartConfig())
