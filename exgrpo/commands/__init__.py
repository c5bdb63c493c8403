"""The command line (`exgrpo <command>`, exgrpo/cli.py): one module per subcommand, thin argparse over the
packages. A command's module never shares its name with the library code it calls, so each name means one
thing: `plan` calls `exgrpo.workflow.job_plan`, `studies` `exgrpo.workflow.study_table`, `switches`
`exgrpo.core.release_switches`, `sft` `exgrpo.tiny.sft_trainer`, `download` `exgrpo.hub.fetch`, `chat-prompts`
`exgrpo.hub.chat_prompt_rows` (tests/test_import_graph.py checks it).

Each module has `HELP`, `add_arguments(parser)` and `run(args) -> int`; `_flags` holds the conventions shared
by all of them (one flag name per concept, deprecated aliases, `--set KEY=VALUE`).
"""
