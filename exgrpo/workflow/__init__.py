"""The workflow's Python logic: the study configuration Snakemake runs, validated, sized and planned.

- `workflow_config`: config/config.yaml and its overlays, read and validated once (`load_config`).
- `study`: one study entry resolved (`Study`, `resolve_study`).
- `regimes`: the regime map of the tiny testbed and its arms.
- `cluster`: job sizes and SLURM site settings per rule.
- `studies`: every study with its job count and cost (`exgrpo studies`).
- `plan`: a target's jobs, GPU-hours and critical path from Snakemake's dry run (`exgrpo plan`).
- the helpers the rules of workflow/rules/*.smk read (common.smk builds `targets.WorkflowHelpers` once and binds
  its methods): `paths` (the layout), `paper_paths`, `hub_inputs`, `job_args`, `rule_resources`, `segments`,
  `targets` (stage targets, the regime map) and `guards` (the `onstart` refusals).
"""
