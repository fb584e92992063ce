"""`python -m gpudiag` is the `gpudiag` command."""

import sys

from gpudiag.entry import main

sys.exit(main())
