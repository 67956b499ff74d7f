"""The credit-assignment toys: ``StepGym/CreditToy-v0`` and ``StepGym/CreditFamily-v0`` (docs/credit.md).

:mod:`.toy` (the corridor where one decision decides success), :mod:`.family` (the family of toys with knobs that
separate the shapers), :mod:`.prompt` (their compact text format, ``"credit"``). Their value oracle is the generic
:class:`stepgym.envs.oracle.StepsToWinOracle`. Importing this package registers both envs and imports none of
their modules.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["CreditFamilyConfig", "CreditFamilyEnv", "CreditToyEnv"]

register(
    "StepGym/CreditToy-v0",
    "stepgym.envs.credit:CreditToyEnv",
    max_steps=10,
    text_format="credit",
    splits=EnvSplits(("train", "valid"), "valid"),
    value_oracle="stepgym.envs.oracle:StepsToWinOracle",
)

register(
    "StepGym/CreditFamily-v0",
    "stepgym.envs.credit:CreditFamilyEnv",
    max_steps=20,
    text_format="credit",
    splits=EnvSplits(("train", "valid"), "valid"),
    value_oracle="stepgym.envs.oracle:StepsToWinOracle",
)

# The names below load on first use (PEP 562), so registering the envs imports none of their modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CreditToyEnv": "stepgym.envs.credit.toy",
        "CreditFamilyEnv": "stepgym.envs.credit.family",
        "CreditFamilyConfig": "stepgym.envs.credit.family",
    },
)
