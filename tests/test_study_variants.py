"""The hand-written-aids study's variants (benchmarks/studies/hand_written_aids.py): each takes
one aid off the anchor study's clear+arm model, and the judge's shares that model."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # common.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
import hand_written_aids as aids  # noqa: E402
from anchor_clearing import VARIANTS  # noqa: E402


def test_each_variant_turns_one_aid_off_the_clear_arm_model():
    base = VARIANTS["clear+arm"]
    assert aids.without("gate") == {"objects": base["objects"] | {"gate": False}}
    assert aids.without("motion") == {"objects": base["objects"], "proprio": {"commanded": False}}
    # without carried pixels there is no carried frame to clear either
    assert aids.without("carry") == {"objects": {"clear": False, "clear_arm": False, "carry": False}}
    judged = aids.without("rule")
    assert judged.pop("imagination") == {"judge": "head"} and judged == base  # the same model, replayed otherwise
