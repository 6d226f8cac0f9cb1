"""The hand-written-aids study's variants (benchmarks/studies/hand_written_aids.py): each toggles
one aid of the ladder's `tiny` model, and the judge's and the reference's reuse that model."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # common.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
import hand_written_aids as aids  # noqa: E402
from anchor_clearing import trained  # noqa: E402

from worldsim.world_models.config import ObjectPathwayConfig, build_config  # noqa: E402


def test_each_variant_toggles_one_aid_from_the_preset_and_builds():
    tiny = build_config("tiny").objects
    assert tiny is not None and not tiny.paste  # the aid the paste variant turns on is off in tiny
    for aid, (name, changes) in aids.TOGGLED.items():
        objects = changes.get("objects", {})
        ObjectPathwayConfig(**{**vars(tiny), **objects})  # each variant's options are a model that builds
        assert name and set(changes) <= {"objects", "proprio", "frames", "camera", "imagination"}, aid
    assert aids.TOGGLED["paste"][1] == {"objects": {"paste": True}}
    # without carried pixels there is no carried frame to clear, nor anything left unpasted
    assert aids.TOGGLED["carry"][1]["objects"] == {"carry": False, "clear": False, "clear_arm": False, "paste": True}
    assert aids.TOGGLED["rule"][1] == {"imagination": {"judge": "head"}}  # the same model, replayed otherwise
    assert build_config("tiny").camera == "fitted" and aids.TOGGLED["camera"][1] == {"camera": "fitted"}
    assert aids.TOGGLED["planes"][1] == {"frames": {"gripper_planes": False}}  # a state-free model's camera use


def test_no_changes_on_its_own_data_is_the_ladder_model_itself_and_a_foreign_section_is_refused(tmp_path):
    base = tmp_path / "wm"
    (base / "world_model").mkdir(parents=True)
    (base / "config.json").write_text(json.dumps({"model": {}, "data": str(tmp_path / "data.h5")}))
    assert trained(base, {}, tmp_path / "data.h5", tmp_path / "copy") == base  # its own data: nothing retrained
    assert not (tmp_path / "copy").exists()
    with pytest.raises(ValueError, match=r"a variant changes \[model.objects\], \[model.proprio\], \[model.judge\], "
                                         r"\[model.frames\] or \[model\] camera, not dynamics"):
        trained(base, {"dynamics": {"horizon": 4}}, tmp_path / "data.h5", tmp_path / "variant")


def test_a_variant_keeps_the_base_models_built_options_and_changes_only_its_own(tmp_path, monkeypatch):
    """The judge's options (``[model.judge] heights``) reach the variant's training as the other
    sections' do: the base model's built values, the change on top, nothing from today's preset."""
    import anchor_clearing

    base = tmp_path / "wm"
    (base / "world_model").mkdir(parents=True)
    (base / "config.json").write_text(json.dumps({"model": {}, "data": str(tmp_path / "data.h5"), "steps": 800}))
    built = {"objects": {"hidden": 64}, "proprio": {"hidden": 32}, "judge": {"outcome": "rule", "hidden": 16},
             "camera": "scene"}
    (base / "world_model" / "config.json").write_text(json.dumps({"config": built}))
    ran = []
    monkeypatch.setattr(anchor_clearing.subprocess, "run", lambda command, check: ran.append(command))
    out = tmp_path / "variant" / "wm"
    assert trained(base, {"judge": {"heights": True}}, tmp_path / "data.h5", out) == out
    settings = json.loads((tmp_path / "variant" / "train_wm.json").read_text())
    assert settings["model"]["judge"]["heights"] is True and settings["model"]["judge"]["hidden"] == 16
    assert settings["model"]["objects"]["hidden"] == 64 and settings["model"]["proprio"]["sees_cubes"] is False
    assert settings["steps"] == 800 and settings["out"] == str(out) and len(ran) == 1
