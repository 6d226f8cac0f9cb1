"""Runtime plumbing every stage uses: atomic writes, checkpoints, run logs, torchrun, videos, and
the training run around every trainer."""
