"""Policy evaluation in imagination (Ctrl-World): rank policy checkpoints by their success in a
world model and check the ranking against their real success (``worldsim rank-policies``).

Each policy runs ``imagined_episodes`` imagined episodes per task from real episode starts of
the keyframe file, and ``episodes`` real episodes per task in physics. The agreement of the two
is measured over policies (mean success over tasks) and over (policy, task) pairs: Spearman's
rank correlation (does imagination order the checkpoints as reality does) and Pearson's
(are the success rates themselves close), from ``scipy.stats``. With ``held_out``
demonstrations the rankers a user has without any rollout (:mod:`worldsim.evaluation.offline`:
validation loss, action error, action entropy) are scored beside it: an evaluator in
imagination is worth its cost only where it ranks better than they do.

The statistics of a ranking over episodes (:func:`outcome_matrix` and what takes it) resample
the episodes behind each success rate, so every figure carries its interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from rich.table import Table

from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.tasks import get_suite, get_task
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.run_logging import write_json
from worldsim.runtime.validation import positive_ints


def per_task_summary(evaluation: dict[str, Any]) -> dict[str, Any]:
    """The success part of an :meth:`~worldsim.evaluation.evaluate.EvalResults.to_json` document."""
    return {"success_rate": evaluation["success_rate"], "episodes": evaluation["episodes"],
            "per_task": {task: {"success_rate": r["success_rate"], "ci95": r["ci95"], "episodes": r["episodes"],
                                "outcomes": r.get("outcomes", [])}
                         for task, r in evaluation["per_task"].items()}}


REAL_EVAL_SEED_OFFSET = 10_000
"""Real evaluations of a run's policies start at ``seed + 10000`` (test episodes elsewhere)."""


def evaluate_real_and_imagined(policy_path: str | Path, tasks: list[str], *, episodes: int,
                               imagined_episodes: int, imagination: ImaginationConfig | None, seed: int = 0,
                               progress: bool = True, real: dict[str, Any] | None = None) -> dict[str, Any]:
    """Success of one policy per task: ``real`` in physics (deterministic, seed ``seed + 10000``,
    the RL trainers' evaluation protocol; pass an existing result to skip it) and ``imagined`` in
    the world model of ``imagination`` from the real episode starts of its keyframes (seed
    ``seed + 20000``; left out without a world model)."""
    from worldsim.evaluation.evaluate import evaluate_in_physics, evaluate_policy
    from worldsim.policies import load_policy

    policy = load_policy(policy_path).eval()
    if real is None:
        real = evaluate_in_physics(policy, tasks, episodes, seed=seed + REAL_EVAL_SEED_OFFSET)
    result = {"policy": str(policy_path), "real": per_task_summary(real)}
    if imagination is not None and imagination.imagined:
        dream = evaluate_policy(policy, tasks, imagined_episodes, num_envs=32, seed=seed + 20_000,
                                progress=progress, imagination=imagination)
        result["imagined"] = per_task_summary(dream.to_json())
    return result


def rank_agreement(real: ArrayLike, imagined: ArrayLike) -> dict[str, float]:
    """Spearman and Pearson correlation of imagined with real success (NaN when either is
    constant), and ``spearman_p``: the one-sided permutation p-value of Spearman's rho (the
    chance that a ranking unrelated to the real one agrees at least as well; exact, over every
    order, up to 7 policies, where scipy's t approximation is poor; 9,999 random orders beyond)."""
    from scipy.stats import pearsonr, permutation_test, spearmanr

    real, imagined = np.asarray(real, float), np.asarray(imagined, float)
    if len(real) < 2 or np.ptp(real) == 0 or np.ptp(imagined) == 0:
        return {"spearman": float("nan"), "spearman_p": float("nan"), "pearson": float("nan"), "n": len(real)}
    rho = spearmanr(real, imagined).statistic
    test = permutation_test((imagined,), lambda x: spearmanr(real, x).statistic, permutation_type="pairings",
                            alternative="greater", n_resamples=9_999, random_state=0)
    return {"spearman": float(rho), "spearman_p": float(test.pvalue),
            "pearson": float(pearsonr(real, imagined).statistic), "n": len(real)}


def outcome_matrix(evaluations: list[dict[str, Any]], tasks: tuple[str, ...] | list[str]) -> np.ndarray:
    """Episode outcomes ``(policies, tasks, episodes)`` (0/1) from :func:`per_task_summary`
    documents; every policy and task must hold the same number of episodes."""
    counts = {len(e["per_task"][t]["outcomes"]) for e in evaluations for t in tasks}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"every policy and task needs the same number of recorded outcomes; got {sorted(counts)}")
    return np.array([[e["per_task"][t]["outcomes"] for t in tasks] for e in evaluations], float)


def spearman_kendall(real: ArrayLike, predicted: ArrayLike) -> dict[str, float]:
    """Spearman's rho and Kendall's tau-b of ``predicted`` against ``real`` (NaN when either is
    constant)."""
    from scipy.stats import kendalltau, spearmanr

    real, predicted = np.asarray(real, float), np.asarray(predicted, float)
    if len(real) < 2 or np.ptp(real) == 0 or np.ptp(predicted) == 0:
        return {"spearman": float("nan"), "kendall": float("nan")}
    return {"spearman": float(spearmanr(real, predicted).statistic),
            "kendall": float(kendalltau(real, predicted).statistic)}


def rowwise_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of ``a`` with the same row of ``b`` (average ranks for ties;
    NaN for a constant row)."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a, axis=-1), rankdata(b, axis=-1)
    ra, rb = ra - ra.mean(-1, keepdims=True), rb - rb.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ra * rb).sum(-1) / np.sqrt((ra ** 2).sum(-1) * (rb ** 2).sum(-1))


def resampled_rates(outcomes: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` bootstrap replicas of each policy's mean success ``(draws, policies)``, the
    episodes of every (policy, task) resampled with replacement."""
    p, t, e = outcomes.shape
    pick = rng.integers(0, e, size=(draws, p, t, e))
    return np.take_along_axis(outcomes[None], pick, axis=-1).mean(axis=(2, 3))


def bootstrap_spearman(real: np.ndarray, imagined: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Spearman of imagined with real success over policies, for ``draws`` bootstrap replicas
    of both sides' episodes (outcome matrices of :func:`outcome_matrix`)."""
    return rowwise_spearman(resampled_rates(real, draws, rng), resampled_rates(imagined, draws, rng))


def pairwise_accuracy(real: ArrayLike, predicted: ArrayLike, gap: float) -> dict[str, Any]:
    """Of the policy pairs at least ``gap`` apart in real success, the share that ``predicted``
    orders as reality does (a tie counts half); ``None`` without such pairs."""
    real, predicted = np.asarray(real, float), np.asarray(predicted, float)
    i, j = np.triu_indices(len(real), 1)
    far = np.abs(real[i] - real[j]) >= gap - 1e-12
    if not far.any():
        return {"accuracy": None, "pairs": 0}
    agree = np.sign(real[i] - real[j])[far] * np.sign(predicted[i] - predicted[j])[far]
    return {"accuracy": float(np.mean((agree > 0) + 0.5 * (agree == 0))), "pairs": int(far.sum())}


def split_half(real: np.ndarray, rng: np.random.Generator, splits: int = 200) -> dict[str, Any]:
    """The real ranking's own stability: Spearman between the success rates of two random
    halves of every (policy, task)'s episodes, mean and 5-95% range over ``splits`` splits. No
    evaluator can agree with a ranking on half the episodes better than the other half does."""
    e = real.shape[-1]
    order = np.argsort(rng.random((splits, e)), axis=-1)
    first = np.take(real, order[:, : e // 2], axis=-1).mean(axis=(1, 3)).T  # (splits, policies)
    second = np.take(real, order[:, e // 2:], axis=-1).mean(axis=(1, 3)).T
    rho = rowwise_spearman(first, second)
    return {"spearman": float(np.nanmean(rho)), "range_5_95": [float(np.nanpercentile(rho, 5)),
                                                                 float(np.nanpercentile(rho, 95))]}


def episodes_equivalent(real: np.ndarray, predicted: ArrayLike, rng: np.random.Generator,
                        splits: int = 100) -> dict[str, Any]:
    """How many real episodes per task the ``predicted`` ranking is worth: every split holds out
    a random half of each (policy, task)'s episodes as the reference; the prediction's Spearman
    against it is set beside rankings from ``k`` real episodes per task drawn from the other
    half. ``real_episodes_equivalent`` is the largest ``k`` whose ranking agrees no better than
    the prediction does on average (0: one real episode per task already agrees better)."""
    predicted = np.asarray(predicted, float)
    e = real.shape[-1]
    half = e // 2
    ks = sorted({k for k in (1, 2, 3, 5, 10, 20, 40, 80, 160) if k <= half} | {half})
    curve: dict[int, list[float]] = {k: [] for k in ks}
    model: list[float] = []
    for _ in range(splits):
        order = rng.permutation(e)
        reference = real[..., order[half:]].mean(axis=(1, 2))
        model.append(spearman_kendall(reference, predicted)["spearman"])
        for k in ks:
            curve[k].append(spearman_kendall(reference, real[..., order[:k]].mean(axis=(1, 2)))["spearman"])
    mean = {k: float(np.nanmean(v)) for k, v in curve.items()}
    agreement = float(np.nanmean(model))
    worth = max([k for k in ks if mean[k] <= agreement + 1e-9], default=0)
    return {"spearman_vs_half": agreement, "real_episodes_equivalent": worth,
            "real_curve": {str(k): v for k, v in mean.items()}}


@dataclass
class RankConfig:
    """A ranking of policy checkpoints in imagination (:func:`rank_policies`)."""

    policies: tuple[Path, ...]
    """Policy checkpoints or run folders (at least 2; e.g. runs/ckpt_*)."""
    suite: str | None = None
    """Evaluate every seen task of this suite."""
    task: tuple[str, ...] = ()
    """Or this task (repeat --task for several; default with neither: the world model's tasks)."""
    episodes: int = 50
    """Real episodes per policy and task."""
    imagined_episodes: int = 32
    """Imagined episodes per policy and task."""
    out: Path = Path("runs/rank")
    """Folder for ranking.json, ranking.md and ranking.png."""
    seed: int = 0
    """Seed of the evaluations (every policy sees the same real and imagined starts)."""
    progress: bool = True
    """Show progress bars."""
    held_out: Path | None = None
    """Demonstrations none of the policies trained on (an episode file): score the rankers a
    user has without rollouts (validation loss, action error, action entropy) beside imagination."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """The world model the policies are ranked in (--world-model and --keyframes are needed);
    imagined episodes start at the keyframes' real episode starts and run to the time limit."""

    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {
        "imagination": ("keyframe_ratio", "horizon", "reward_type")}
    """Evaluation starts at episode starts, runs to the time limit and reads success only."""

    def __post_init__(self) -> None:
        self.imagination.require("rank-policies")
        if len(self.policies) < 2:
            raise ValueError(f"--policies names {len(self.policies)} checkpoint(s); ranking needs at least 2")
        positive_ints(self, ("episodes", "imagined_episodes"))
        if self.held_out is not None and not Path(self.held_out).exists():
            raise ValueError(f"held_out={str(self.held_out)!r}: no such file")


def rank_policies(config: RankConfig) -> dict[str, Any]:
    """Evaluate every policy in physics and in the world model, and measure how well imagination
    ranks them (:func:`rank_agreement`); writes ``ranking.json``, ``ranking.md`` and
    ``ranking.png`` to ``config.out`` and returns the ranking document."""
    from worldsim.policies.base import load_policy
    from worldsim.world_models import WorldModel

    for path in config.policies:
        load_policy(path)  # a missing or broken checkpoint fails here, before any evaluation
    world_model = config.imagination.world_model
    assert world_model is not None  # required in RankConfig.__post_init__
    model_tasks = WorldModel.from_pretrained(world_model).config.tasks
    tasks = (list(get_suite(config.suite).seen) if config.suite
             else [get_task(t).name for t in config.task] or list(model_tasks))
    unknown = [t for t in tasks if t not in model_tasks]
    if unknown:
        raise ValueError(f"the world model was not trained on {', '.join(unknown)}; it knows "
                         f"{', '.join(model_tasks)}")
    rows = [evaluate_real_and_imagined(p, tasks, episodes=config.episodes,
                                       imagined_episodes=config.imagined_episodes,
                                       imagination=config.imagination, seed=config.seed,
                                       progress=config.progress)
            for p in config.policies]
    real = np.array([r["real"]["success_rate"] for r in rows])
    imagined = np.array([r["imagined"]["success_rate"] for r in rows])
    rng = np.random.default_rng(config.seed)
    draws = bootstrap_spearman(outcome_matrix([r["real"] for r in rows], tasks),
                               outcome_matrix([r["imagined"] for r in rows], tasks), 1000, rng)
    over_policies = rank_agreement(real, imagined) | spearman_kendall(real, imagined) | {
        "spearman_ci": np.nanpercentile(draws, [2.5, 97.5]).tolist() if np.isfinite(draws).any() else None,
        "pairwise_accuracy_10": pairwise_accuracy(real, imagined, 0.10)["accuracy"]}
    offline: dict[str, Any] = {}
    if config.held_out is not None:
        from worldsim.evaluation.offline import SIGNALS, offline_signals

        for path, row in zip(config.policies, rows, strict=True):
            row["offline"] = offline_signals(load_policy(path), config.held_out)
        offline = {name: spearman_kendall(real, [sign * r["offline"][name] for r in rows]) for name, sign in
                   SIGNALS.items()}
    pairs = [(r["real"]["per_task"][t]["success_rate"], r["imagined"]["per_task"][t]["success_rate"])
             for r in rows for t in tasks]
    result = {"tasks": tasks, "world_model": str(config.imagination.world_model),
              "rung": config.imagination.rung.name, "policies": rows,
              "over_policies": over_policies, "offline_rankers": offline,
              "over_policy_task_pairs": rank_agreement(*np.array(pairs).T),
              "per_task": {t: rank_agreement([r["real"]["per_task"][t]["success_rate"] for r in rows],
                                             [r["imagined"]["per_task"][t]["success_rate"] for r in rows])
                           for t in tasks} if len(tasks) > 1 else {},
              "mean_abs_error": float(np.abs(real - imagined).mean())}
    write_json(config.out / "ranking.json", result)
    write_ranking_report(result, config.out)
    return result


def ranking_table(result: dict[str, Any]) -> Table:
    """Policies in order of imagined success, with their real success and ranks."""
    rows = result["policies"]
    order = np.argsort([-r["imagined"]["success_rate"] for r in rows], kind="stable")
    real_rank = {i: k + 1 for k, i in enumerate(np.argsort([-r["real"]["success_rate"] for r in rows],
                                                            kind="stable"))}
    table = Table(title="policies ranked in imagination")
    for column in ("rank (imagined)", "policy", "imagined", "real", "rank (real)"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for k, i in enumerate(order):
        r = rows[i]
        table.add_row(str(k + 1), r["policy"], f"{100 * r['imagined']['success_rate']:.1f}%",
                      f"{100 * r['real']['success_rate']:.1f}%", str(real_rank[i]))
    return table


def _rate(task_result: dict[str, Any]) -> str:
    low, high = task_result["ci95"]
    return f"{100 * task_result['success_rate']:.0f}% ({100 * low:.0f}-{100 * high:.0f})"


def write_ranking_report(result: dict[str, Any], out: Path) -> None:
    """``ranking.md`` (table and correlations) and ``ranking.png`` (imagined vs real success)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["policies"]
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for r in rows:
        ax.scatter(r["real"]["success_rate"], r["imagined"]["success_rate"], color="tab:blue")
        ax.annotate(Path(r["policy"]).name, (r["real"]["success_rate"], r["imagined"]["success_rate"]), fontsize=7)
    ax.plot([0, 1], [0, 1], "--", color="grey", lw=1)
    ax.set_xlabel("real success")
    ax.set_ylabel("imagined success")
    agree = result["over_policies"]
    ax.set_title(f"Spearman {agree['spearman']:.2f}, Pearson {agree['pearson']:.2f}")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    with atomic_path(out / "ranking.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    tasks = result["tasks"]
    lines = [f"# Policy ranking in imagination ({', '.join(tasks)})", "",
             "Success per task with its 95% Wilson interval, imagined / real.", "",
             "| policy | imagined | real | " + " | ".join(tasks) + " |", "|---|---|---|" + "---|" * len(tasks)]
    for r in rows:
        cells = [f"{_rate(r['imagined']['per_task'][t])} / {_rate(r['real']['per_task'][t])}" for t in tasks]
        lines.append(f"| {r['policy']} | {100 * r['imagined']['success_rate']:.1f}% | "
                     f"{100 * r['real']['success_rate']:.1f}% | " + " | ".join(cells) + " |")
    pairs = result["over_policy_task_pairs"]
    interval = agree.get("spearman_ci")
    within = f", 95% interval over episodes {interval[0]:.2f} to {interval[1]:.2f}" if interval else ""
    lines += ["", f"Over policies: Spearman {agree['spearman']:.3f} "
              f"(permutation p = {agree['spearman_p']:.3f}{within}), "
              f"Pearson {agree['pearson']:.3f} (n = {agree['n']}). Over (policy, task) pairs: Spearman "
              f"{pairs['spearman']:.3f}, Pearson {pairs['pearson']:.3f} (n = {pairs['n']}). Mean |imagined - real|: "
              f"{result['mean_abs_error']:.3f}."]
    lines += [f"Ranked without rollouts ({name}, on held-out demonstrations): Spearman {a['spearman']:.3f}, "
              f"Kendall {a['kendall']:.3f}." for name, a in result.get("offline_rankers", {}).items()]
    lines += [f"Over policies on {t}: Spearman {a['spearman']:.3f} (p = {a['spearman_p']:.3f}), Pearson "
              f"{a['pearson']:.3f}." for t, a in result.get("per_task", {}).items()]
    lines += ["", "![imagined vs real](ranking.png)"]
    with atomic_path(out / "ranking.md") as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
