"""Run resolution, torch-free: what one training run is, resolved once from the method's configuration.

- `trainer_settings`: the trainer settings of both runtimes (`TrainerSettings`) and their verl keys.
- `backbones`: the backbone registry (config/backbones.yaml) and what each entry decides.
- `resolve`: the one resolution of a run (defaults < backbone < variant < budget < overrides) and its run file.
- `yaml_files`: strict YAML reading and JSON Schema checks, errors naming file and field.
"""
