"""Hydra configs for ``python -m stepgym.integrations.verl.train`` (one per benchmark; see stepgym_base.yaml)."""
