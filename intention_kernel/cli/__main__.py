"""``python -m intention_kernel.cli``."""

import sys

from . import main

sys.exit(main())
