"""`python -m app ...` is `kernelswarm ...`."""

import sys

from app.cli import main

sys.exit(main())
