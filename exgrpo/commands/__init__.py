"""The command line (`exgrpo <command>`, exgrpo/cli.py): one module per subcommand, thin argparse over the
packages; `commands/<name>.py` is the command line of the library code it names (`plan` of
`exgrpo.workflow.plan`, `sft` of `exgrpo.tiny.sft`, `download` of `exgrpo.hub.download`, ...).

Each module has `HELP`, `add_arguments(parser)` and `run(args) -> int`; `_flags` holds the conventions shared
by all of them (one flag name per concept, deprecated aliases, `--set KEY=VALUE`).
"""
