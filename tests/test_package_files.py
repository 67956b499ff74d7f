"""The files a user of the package reads beside the code agree with it: the license, the changelog and the
citation name the version and the license that pyproject.toml declares."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

import stepgym

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_license_file_is_the_declared_mit_license() -> None:
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text


def test_citation_and_changelog_name_this_version() -> None:
    assert PROJECT["version"] == stepgym.__version__
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == stepgym.__version__ and cff["license"] == PROJECT["license"]
    assert cff["title"] and cff["authors"] and cff["message"]
    assert f"## [{stepgym.__version__}]" in (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_metadata_carries_the_readme_classifiers_and_extras() -> None:
    assert PROJECT["readme"] == "README.md"
    assert "Programming Language :: Python :: 3.11" in PROJECT["classifiers"]
    extras = PROJECT["optional-dependencies"]
    assert {"alfworld", "webshop", "searchqa", "train", "trl", "verl", "serve", "docs", "dev"} <= set(extras)
    assert any(dep.startswith("mkdocs==") for dep in extras["docs"])
    assert any(dep.startswith("build==") for dep in extras["dev"])
