"""``python -m worldsim <command>`` (what ``torchrun -m worldsim ...`` runs)."""

import sys

from worldsim.commands.cli import main

sys.exit(main())
