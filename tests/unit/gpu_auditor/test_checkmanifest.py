"""`gpu-auditor check-manifest`: every class of mistake found in files, folders, Lists and
stdin; exit 1 on findings, 2 on input it cannot read, 0 on clean manifests."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.cli import main

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["check-manifest", *argv], stdout=out, stderr=err, stdin=io.BytesIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_each_class_of_mistake_is_one_line_naming_object_and_container() -> None:
    code, out, err = run(str(FIXTURES / "mistakes.yaml"))
    assert code == 1 and err == ""
    lines = out.splitlines()
    expected = [
        ("Deployment team/unknown-key", "did you mean expandable_segments?"),
        ("StatefulSet lower-case-bool", "did you mean expandable_segments:True?"),
        ("DaemonSet out-of-range", "set it in (0.0, 1.0)"),
        ("Job backend-ignores", "backend:cudaMallocAsync ignores it"),
        ("CronJob no-op-default", 'container "warmup"'),
        ("Pod both-variables", "torch reads PYTORCH_CUDA_ALLOC_CONF and ignores this one"),
        ("Pod not-in-release", "needs torch >= 2.1"),
        ("Pod syntax", "Expected ':'"),
    ]
    assert len(lines) == len(expected)
    for line, (ref, words) in zip(lines, expected, strict=True):
        assert f": {ref}: " in line and words in line, line
    assert lines[0].startswith(f"{FIXTURES / 'mistakes.yaml'}:3: ")


def test_a_list_nested_in_a_list_in_json() -> None:
    code, out, _ = run(str(FIXTURES / "list.json"))
    assert code == 1
    assert 'Pod ns/in-a-list: container "train": PYTORCH_ALLOC_CONF: ' in out


def test_valid_manifests_exit_0_and_print_nothing() -> None:
    assert run(str(FIXTURES / "valid.yaml")) == (0, "", "")


def test_a_folder_is_walked_in_sorted_order() -> None:
    code, out, _ = run(str(FIXTURES))
    assert code == 1
    files = [line.split(":", 1)[0] for line in out.splitlines()]
    assert files == sorted(files) and len(out.splitlines()) == 9


def test_stdin_is_read_with_dash(tmp_path: Path) -> None:
    data = (FIXTURES / "mistakes.yaml").read_bytes()
    code, out, _ = run("-", stdin=data)
    assert code == 1 and out.startswith("stdin:3: Deployment team/unknown-key")


@pytest.mark.parametrize(("content", "reason"), [
    (b"a: [\n", "not YAML: line 2"),
    (b"kind: Deployment\nspec: {{ .Values.x }}\n", "render it first: helm template"),
    (b"a: !!python/object:os.system x\n", "not YAML"),
])
def test_bad_input_exits_2_with_the_reason(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    code, out, err = run(str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"gpu-auditor: {path}: ") and reason in err


def test_a_bad_input_does_not_hide_the_findings_of_the_others(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    code, out, err = run(str(missing), str(FIXTURES / "mistakes.yaml"))
    assert code == 2
    assert "No such file or directory" in err and len(out.splitlines()) == 8


def test_alias_bomb_is_read_without_blowing_up(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 30)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nkind: Pod\nspec: {containers: *a29}\n")
    assert run(str(path))[0] == 0


GOOD_BAD_POD = ("kind: Pod\nmetadata: {name: train}\nspec:\n  containers:\n  - name: c\n"
                "    env:\n    - {name: PYTORCH_CUDA_ALLOC_CONF, "
                "value: 'expandable_segment:True'}\n")


@pytest.mark.parametrize(("content", "reason"), [
    ("kind: ConfigMap\ndata: {}\nreleased: 2023-02-30\n", "day is out of range for month"),
    ("kind: ConfigMap\nsize: " + "9" * 5000 + "\n", "Exceeds the limit (4300 digits)"),
    ("kind: ConfigMap\nx: !!int abc\n", "invalid literal for int()"),
    ("kind: ConfigMap\nx: !!float '1e99999999999999999999999999999999x'\n", "could not convert"),
])
def test_a_value_yaml_cannot_construct_exits_2_naming_the_file_and_the_rest_is_checked(
    tmp_path: Path, content: str, reason: str
) -> None:
    """The constructor's ValueError was a traceback and exit 1, and the files after it were
    never read."""
    bad, good = tmp_path / "bad.yaml", tmp_path / "z.yaml"
    bad.write_text(content)
    good.write_text(GOOD_BAD_POD)
    code, out, err = run(str(bad), str(good))
    assert code == 2
    assert err.startswith(f"gpu-auditor: {bad}: a value YAML cannot construct in the document "
                          "at line 1: ") and reason in err
    assert out.startswith(f"{good}:1: Pod train: ")


def test_nesting_too_deep_for_the_pure_python_loader_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyYAML without libyaml (built from the sdist) raises RecursionError at 500 levels."""
    import yaml

    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    good = tmp_path / "z.yaml"
    good.write_text(GOOD_BAD_POD)
    code, out, err = run("-", str(good), stdin=b"[" * 2000 + b"]" * 2000)
    assert code == 2
    assert err == "gpu-auditor: stdin: not YAML that can be read: line 1: nested too deeply\n"
    assert out.startswith(f"{good}:1: Pod train: ")


def test_nesting_past_libyaml_s_limit_is_not_yaml(tmp_path: Path) -> None:
    code, _, err = run("-", stdin=b"[" * 5000 + b"]" * 5000)
    assert code == 2 and "exceeded maximum nesting depth" in err


@pytest.fixture
def watchdog() -> Iterator[None]:
    """Turns a read that would wait forever (the old behaviour) into a failure."""
    def fail(*_: object) -> None:
        raise AssertionError("check-manifest waited on a file that is not a regular one")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_fifo_in_a_folder_is_refused_not_waited_on(tmp_path: Path, watchdog: None) -> None:
    os.mkfifo(tmp_path / "a.yaml")
    (tmp_path / "z.yaml").write_text(GOOD_BAD_POD)
    code, out, err = run(str(tmp_path))
    assert code == 2
    assert err == (f"gpu-auditor: {tmp_path / 'a.yaml'}: not a regular file (a FIFO or pipe); "
                   "pipe it to - instead\n")
    assert out.startswith(f"{tmp_path / 'z.yaml'}:1: Pod train: ")


def test_a_symlink_to_a_pipe_is_refused_named_or_in_a_folder(tmp_path: Path) -> None:
    """A committed symlink to /proc/self/fd/1 opens our own stdout pipe for reading: the
    read waited forever. Here the pipe's writer is closed, so the old code read it as empty
    and passed it."""
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        link = tmp_path / "evil.yaml"
        link.symlink_to(f"/proc/self/fd/{read_end}")
        for argv in ([str(link)], [str(tmp_path)]):
            code, out, err = run(*argv)
            assert code == 2 and out == ""
            assert err == f"gpu-auditor: {link}: not a regular file (a FIFO or pipe); pipe it " \
                          "to - instead\n"
    finally:
        os.close(read_end)


def test_a_symlink_to_a_device_is_refused_and_one_to_a_regular_file_is_read(
    tmp_path: Path
) -> None:
    (tmp_path / "null.yaml").symlink_to("/dev/null")
    (tmp_path / "real.yaml").write_text(GOOD_BAD_POD)
    (tmp_path / "z-link.yaml").symlink_to(tmp_path / "real.yaml")
    code, out, err = run(str(tmp_path))
    assert code == 2
    assert "null.yaml: not a regular file (a character device)" in err
    assert [line.split(":", 1)[0] for line in out.splitlines()] == [
        str(tmp_path / "real.yaml"), str(tmp_path / "z-link.yaml")]


def test_a_file_name_with_terminal_escapes_is_printed_cleaned(tmp_path: Path) -> None:
    name = "ok\x1b]0;owned\x07\r\x1b[2K.yaml"
    (tmp_path / name).write_text(GOOD_BAD_POD)
    (tmp_path / "b\x1b[31m.yaml").write_text("a: [\n")
    code, out, err = run(str(tmp_path))
    assert code == 2
    assert out.startswith(f"{tmp_path}/ok?]0;owned???[2K.yaml:1: Pod train: ")
    assert err.startswith(f"gpu-auditor: {tmp_path}/b?[31m.yaml: not YAML")
    assert "\x1b" not in out + err and "\x07" not in out + err and "\r" not in out + err


def test_a_pod_named_by_aliases_64000_times_is_one_finding(tmp_path: Path) -> None:
    """1.4 KB of YAML made 64,000 finding lines (16 MB) in 12.4 s."""
    p = ("{kind: Pod, metadata: {name: x}, spec: {containers: [{name: c, env: "
         "[{name: PYTORCH_CUDA_ALLOC_CONF, value: 'expandable_segment:True'}]}]}}")
    y = ("kind: List\nitems:\n- &l3\n  kind: List\n  items:\n  - &l2\n    kind: List\n"
         f"    items:\n    - &l1\n      kind: List\n      items:\n      - &p {p}\n")
    y += "      - *p\n" * 39 + "    - *l1\n" * 39 + "  - *l2\n" * 39
    code, out, _ = run("-", stdin=y.encode())
    assert code == 1 and len(out.splitlines()) == 1


def test_findings_past_the_printed_bound_are_counted_on_stderr() -> None:
    from gpu_auditor.checkmanifest import MAX_PRINTED

    docs = "---\n".join(GOOD_BAD_POD.replace("train", f"p{i}") for i in range(MAX_PRINTED + 5))
    code, out, err = run("-", stdin=docs.encode())
    assert code == 1 and len(out.splitlines()) == MAX_PRINTED
    assert err == "gpu-auditor: stdin: 5 more findings not printed (the first 1000 are)\n"


def test_an_input_past_its_work_bound_exits_2_after_its_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpu_auditor.checkmanifest as checkmanifest
    from gpu_auditor.admission.findings import Budget

    monkeypatch.setattr(checkmanifest, "Budget", lambda: Budget(left=3))
    good = tmp_path / "z.yaml"
    good.write_text(GOOD_BAD_POD)
    docs = "---\n".join([GOOD_BAD_POD] * 3)
    code, out, err = run("-", str(good), stdin=docs.encode())
    assert code == 2
    assert out.splitlines()[0].startswith("stdin:1: Pod train: ")
    assert err.startswith("gpu-auditor: stdin: checked up to the document at line")
    assert f"{good}:1: Pod train: " in out  # a fresh budget for the next input


def test_a_folder_that_cannot_be_listed_is_named_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.walk passes over a folder it cannot list unless asked (root reads any: simulated)."""
    import gpu_auditor.checkmanifest as checkmanifest

    locked = str(tmp_path / "locked")
    real_walk = os.walk

    def walk(top: str, onerror: Any = None) -> Iterator[tuple[str, list[str], list[str]]]:
        onerror(PermissionError(13, "Permission denied", locked))
        yield from real_walk(top)

    monkeypatch.setattr(checkmanifest.os, "walk", walk)
    (tmp_path / "z.yaml").write_text(GOOD_BAD_POD)
    code, out, err = run(str(tmp_path))
    assert code == 2 and err == f"gpu-auditor: {locked}: Permission denied\n"
    assert out.startswith(f"{tmp_path / 'z.yaml'}:1: ")
