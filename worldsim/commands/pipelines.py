"""Pipeline commands: ``worldsim coevolve`` and ``worldsim quickstart``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from worldsim.pipelines.coevolve import CoevolveConfig
from worldsim.pipelines.quickstart import QuickstartConfig


def coevolve(config: CoevolveConfig) -> None:
    """Co-evolve a policy and a world model: RL in imagination, real data refines the model.

    Each round post-trains the policy in the world model, evaluates it in physics and in
    imagination, rolls back a policy that exploits the model, and refines the model on the new
    policy's real episodes (WoVR, World-VLA-Loop); --mode direct-rl spends the same real budget
    on RL in physics instead. Finished stages are recorded, so --resume continues a run."""
    from worldsim.pipelines.coevolve import coevolve as run

    run(config)


def quickstart(config: QuickstartConfig) -> None:
    """The whole pipeline, small, on CPU, with one report.

    Expert demonstrations, behaviour cloning of TinyVLA, a world model, GRPO in imagination, real
    and imagined evaluation, failure detection; report.md in --out gathers the figures."""
    from worldsim.pipelines.quickstart import quickstart as run

    summary = run(config)
    table = Table(title=f"quickstart on {summary['task']} ({summary['wall_clock_s'] / 60:.1f} min)")
    table.add_column("what")
    table.add_column("figure", justify="right")
    table.add_row("BC TinyVLA, real success", f"{100 * summary['bc_real_success']:.0f}%")
    table.add_row("after GRPO in imagination, real success", f"{100 * summary['final_real_success']:.0f}%")
    for name, auc in summary["detectors_roc_auc"].items():
        table.add_row(f"failure detector {name}, ROC-AUC", f"{auc:.2f}")
    console = Console()
    console.print(table)
    console.print(f"report -> {config.out / 'report.md'}")
