"""``python -m attnserve.export`` = ``attnserve-export``."""

import sys

from .cli import main

sys.exit(main())
