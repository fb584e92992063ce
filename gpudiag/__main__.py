"""`python -m gpudiag` is the `gpudiag` command."""

import sys

from gpudiag.cli import main

sys.exit(main())
