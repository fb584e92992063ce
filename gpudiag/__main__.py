"""`python -m gpudiag` is the `gpudiag` command."""

import sys

try:
    from gpudiag.entry import main
except KeyboardInterrupt:  # Ctrl-C while the entry point itself loads: one line, as in main
    sys.stderr.write("gpudiag: interrupted\n")
    sys.exit(130)

sys.exit(main())
