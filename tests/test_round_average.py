"""The average of a co-evolution run's round policies (benchmarks/coevolve_test_curve.py --average)."""

import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmark scripts
from coevolve_test_curve import average_of_rounds  # noqa: E402


def policy(folder: Path, value: float, config: str) -> str:
    folder.mkdir(parents=True)
    save_file({"w": torch.full((2, 3), value), "b": torch.tensor([value], dtype=torch.float64)},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(config)
    return str(folder)


def test_average_of_rounds_averages_rounds_one_on_once_per_extent(tmp_path: Path) -> None:
    policies = {"round 0": policy(tmp_path / "bc", 100.0, "bc"),  # the base: not a round's policy
                "round 1": policy(tmp_path / "r1", 1.0, "r1"), "round 2": policy(tmp_path / "r2", 2.0, "r2"),
                "round 3": policy(tmp_path / "r3", 6.0, "r3"),
                "direct-rl": policy(tmp_path / "direct", -50.0, "direct")}  # a baseline: left out too
    folder = average_of_rounds(tmp_path / "run", policies)
    weights = load_file(str(folder / "model.safetensors"))
    assert torch.equal(weights["w"], torch.full((2, 3), 3.0))
    assert weights["b"].dtype == torch.float64 and weights["b"].item() == 3.0
    assert (folder / "config.json").read_text() == "r3"  # the last round's
    assert not any(p.name.endswith(".tmp") for p in folder.parent.iterdir())
    assert folder == tmp_path / "run" / "average_of_rounds_1-3" / "policy"
    assert average_of_rounds(tmp_path / "run", policies) == folder  # written once
    policies["round 4"] = policy(tmp_path / "r4", 11.0, "r4")  # the run extended: a new average
    extended = average_of_rounds(tmp_path / "run", policies)
    assert extended.parent.name == "average_of_rounds_1-4"
    assert torch.equal(load_file(str(extended / "model.safetensors"))["w"], torch.full((2, 3), 5.0))
    assert torch.equal(load_file(str(folder / "model.safetensors"))["w"], weights["w"])
