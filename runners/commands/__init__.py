"""One module per benchrun subcommand: `add_parser(subparsers)` registers it (sets `run`)."""
