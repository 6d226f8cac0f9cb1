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
    policy's real episodes; --mode direct-rl spends the same real budget on RL in physics
    instead. Finished stages are recorded, so --resume continues a run."""
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
    c = summary["comparison"]
    table.add_row(f"BC TinyVLA, real success ({c['episodes']} episodes)", f"{100 * c['before']['success_rate']:.1f}%")
    table.add_row("after GRPO in imagination, same episodes", f"{100 * c['after']['success_rate']:.1f}%")
    table.add_row("difference (95% CI), McNemar p", f"{100 * c['difference']:+.1f} "
                  f"({100 * c['difference_ci95'][0]:+.1f}"
                  f" to {100 * c['difference_ci95'][1]:+.1f}), p = {c['p_value']:.2g}")
    wm = summary["world_model"]
    table.add_row("world model PSNR after 8 / 32 steps", f"{wm['psnr_at_8']:.1f} / {wm['psnr_at_32']:.1f} dB")
    last = wm["agreement"]["last_16"]
    table.add_row("imagined vs real outcome, last 16 steps (base rate)",
                  f"{100 * last['accuracy']:.0f}% ({100 * last['base_rate']:.0f}%)")
    for name, d in (summary["detectors"] or {}).items():  # a verdict, never a bare ROC-AUC (report.md has both)
        table.add_row(f"failure detector {name}, steps 1-{d['step']} / 1-{d['where_rollouts_differ']['step']}",
                      f"{d['call']} / {d['where_rollouts_differ']['call']}")
    if summary["detection_skipped"]:
        table.add_row("failure detection", "skipped (see report)")
    console = Console()
    console.print(table)
    console.print(f"report -> {config.out / 'report.md'}")
