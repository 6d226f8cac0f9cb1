"""``lerobot-eval-worldsim``: ``lerobot-eval`` with ``--env.type=worldsim`` registered.

lerobot 0.4 imports no environment plugins by itself, so this entry point imports this package
(which registers the config) and runs lerobot's own ``lerobot-eval`` with every argument given.
Its environment factory is lerobot's, except for ``--env.type=worldsim``, whose suites become one
vector env per task (lerobot's factory makes one env id per config).
"""

from __future__ import annotations

from typing import Any

from lerobot_env_worldsim.config import WorldsimEnv


def main() -> None:
    import lerobot.scripts.lerobot_eval as lerobot_eval

    lerobot_make_env = lerobot_eval.make_env

    def make_env(cfg: Any, n_envs: int = 1, use_async_envs: bool = False, **kwargs: Any) -> Any:
        if isinstance(cfg, WorldsimEnv):
            return cfg.make_envs(n_envs, use_async_envs)
        return lerobot_make_env(cfg, n_envs=n_envs, use_async_envs=use_async_envs, **kwargs)

    lerobot_eval.make_env = make_env
    lerobot_eval.main()


if __name__ == "__main__":
    main()
