"""The standing benchmarks' results: a handful of files, each saying what ran, where and on which code."""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_standing_results_are_few_and_each_records_args_commit_machine_and_metrics() -> None:
    entries = sorted(RESULTS.iterdir())
    assert 0 < len(entries) <= 15, [e.name for e in entries]
    for entry in entries:
        assert entry.suffix == ".json", f"{entry.name}: the top level holds result files only"
        record = json.loads(entry.read_text())
        assert set(record) == {"args", "commit", "machine", "metrics"}, entry.name
        assert isinstance(record["args"], dict) and isinstance(record["metrics"], dict) and record["metrics"]
        assert record["commit"], f"{entry.name}: no commit"
        machine = record["machine"]
        assert machine.get("gpu") or machine.get("cpu_cores"), f"{entry.name}: no machine named"
