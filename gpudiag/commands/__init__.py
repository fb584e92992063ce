"""gpudiag's subcommands: one module each, with add_parser(subparsers) and run(args) -> int
(its line in `gpudiag --help` is gpudiag/cli.py's COMMANDS). A module imports at load only
what building its parser needs: its work is imported inside run."""
