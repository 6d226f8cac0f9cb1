"""``python -m worldsim <command>`` (what ``torchrun -m worldsim ...`` runs)."""

import sys

from worldsim.cli import main

sys.exit(main())
