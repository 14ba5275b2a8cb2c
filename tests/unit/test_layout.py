"""The source layout never shadows Python's own `operator` module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_operator_folder_is_a_source_folder_not_a_package() -> None:
    assert (ROOT / "operator" / "gpu_auditor" / "__init__.py").is_file()
    assert not (ROOT / "operator" / "__init__.py").exists()


@pytest.mark.parametrize("path_entries", [[""], ["", "operator"], [".", "operator"]])
def test_import_operator_from_the_repo_root_is_the_standard_library(
    path_entries: list[str],
) -> None:
    code = (
        f"import sys; sys.path[:0] = {path_entries!r}\n"
        "import operator, collections, importlib\n"
        "operator = importlib.reload(operator)\n"
        "assert hasattr(operator, 'itemgetter'), operator\n"
        "print(operator.__file__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert not out.startswith(str(ROOT)), out


def test_both_import_packages_resolve_to_the_repo() -> None:
    import gpu_auditor
    import node_agent

    assert Path(gpu_auditor.__file__).is_relative_to(ROOT / "operator")
    assert Path(node_agent.__file__).is_relative_to(ROOT / "node_agent")
