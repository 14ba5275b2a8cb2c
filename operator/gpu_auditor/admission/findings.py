"""One container's allocator setting, checked against its torch release by the diagnosis core's
rules (`diagnosis.allocconf`), and worded for the job's owner with a did-you-mean.

The release comes from the container's env or image tag (`base.podspec`, the operator's own
inference); an unknown release is checked as the newest release the rules know, and the finding
says so (set TORCH_VERSION to check against yours).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpu_auditor.base.containerenv import EnvValue, container_env, known_values
from gpu_auditor.base.podspec import ALLOC_CONF_VARIABLES, TORCH_VARIABLES, release_hint
from gpu_auditor.diagnosis.allocconf import KEYS, NEWEST, IssueKind, check, key_available
from gpu_auditor.diagnosis.torchversion import TorchRange, format_release, parse_torch_version

CUDA_VARIABLE, GENERIC_VARIABLE = ALLOC_CONF_VARIABLES
MAX_VALUE: Final = 4096
"""Characters of a setting that are checked; a longer one is reported, not parsed (every key
torch has, each with a long value, takes about 700)."""
MAX_SHOWN: Final = 40
"""Characters of a tenant's key or value echoed in a finding."""
MAX_FINDINGS: Final = 8
"""Findings of one container; past it the last one counts the rest (each did-you-mean is a
difflib search, and a 4 KiB setting of unknown keys has about 570 of them)."""
MAX_HINTED_KEY: Final = 64
"""Characters of an unknown key searched for a did-you-mean (torch's longest key has 30; one
more than twice as long as a key cannot be close enough to it, and difflib's time grows with
the product of the lengths)."""
MAX_WORK: Final = 1 << 21
"""Work one input (a manifest file, an admission request) may cost: one unit per object,
container and env entry read, and per character of a setting checked; about 1.5 s of checks
at most. Unaliased, each unit is at least a few bytes of the input (two million env entries
are some 40 MB of YAML); a YAML alias can name one list or setting any number of times, and
this, not the file's size, bounds the work then."""

CONFLICTING_VARIABLES: Final = "conflicting-variables"
NOT_CHECKED: Final = "not-checked"
UNKNOWN_VALUE: Final = "unknown-value"
"""A setting the container's env names but whose value the spec does not hold (a `valueFrom`,
a `$(VAR)` that an envFrom source, a Service or a `valueFrom` fills): said, not guessed at, and
never a refusal (nothing is known to be wrong)."""
KINDS: Final = (*(k.value for k in IssueKind), CONFLICTING_VARIABLES, NOT_CHECKED,
                UNKNOWN_VALUE)
"""Every finding kind, in the order of the classes in docs/webhook.md."""


@dataclass(frozen=True)
class Finding:
    container: str
    variable: str
    kind: str  # one of KINDS
    message: str

    def text(self) -> str:
        """The one line a user sees (an admission warning, a check-manifest line)."""
        return f'container "{self.container}": {self.variable}: {self.message}'

    @property
    def problem(self) -> bool:
        """A setting known to be wrong or not checked (refused under deny, check-manifest's
        exit 1); an unknown value is only said."""
        return self.kind != UNKNOWN_VALUE


class OverBudget(Exception):
    """The input's work bound (MAX_WORK) is spent: what is left of it is not checked."""


@dataclass
class Budget:
    """What checking one input may still cost (MAX_WORK); shared by all its documents."""

    left: int = MAX_WORK
    spent: bool = False

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            self.spent = True
            raise OverBudget


def shown(text: str, limit: int = MAX_SHOWN) -> str:
    """A tenant's text fit to echo: printable ASCII, at most ``limit`` characters."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text[: limit + 1])
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def release_of(env: Mapping[str, str], image: object) -> tuple[TorchRange, str]:
    """The container's release (from its literal env values and image) and how it is named in a
    finding."""
    release = parse_torch_version(release_hint(env, image))
    if release is None:
        return TorchRange.exact(NEWEST), (
            f"torch release unknown, checked as {format_release(NEWEST)}; "
            "set TORCH_VERSION to check yours"
        )
    return TorchRange.exact(release), f"torch {format_release(release)}"


def check_container(container: Mapping[str, Any], budget: Budget | None = None) -> list[Finding]:
    """Every finding for one container's allocator variables (at most MAX_FINDINGS); [] when
    they are fine or unset. ``budget`` is charged for the env read and the setting checked
    (`OverBudget` when it runs out)."""
    raw_name = container.get("name")
    name = shown(raw_name) if isinstance(raw_name, str) and raw_name else "?"
    raw_env = container.get("env")
    if budget is not None:
        budget.spend(1 + (len(raw_env) if isinstance(raw_env, list) else 0))
    env = container_env(container, (*ALLOC_CONF_VARIABLES, *TORCH_VARIABLES))
    declared: dict[str, EnvValue] = {
        v: env[v] for v in ALLOC_CONF_VARIABLES if v in env and env[v].declared}
    if not declared:
        return []  # unset (or only an envFrom source may set it: not seen, not said)
    unknown = _unknown(name, declared)
    if unknown:
        return unknown
    cuda = declared[CUDA_VARIABLE].value if CUDA_VARIABLE in declared else None
    generic = declared[GENERIC_VARIABLE].value if GENERIC_VARIABLE in declared else None
    release, about = release_of(known_values(env), container.get("image"))
    findings: list[Finding] = []
    if cuda is not None and generic is not None and cuda != generic:
        findings.append(Finding(name, GENERIC_VARIABLE, CONFLICTING_VARIABLES,
                                f"set to a different value than {CUDA_VARIABLE}; torch reads "
                                f"{CUDA_VARIABLE} and ignores this one"))
    if cuda is None and generic is not None and release.surely_below((2, 9)):
        findings.append(Finding(name, GENERIC_VARIABLE, IssueKind.IGNORED.value,
                                f"{about} reads only {CUDA_VARIABLE}: this setting does nothing"))
        return findings
    variable, value = (CUDA_VARIABLE, cuda) if cuda is not None else (GENERIC_VARIABLE, generic)
    assert value is not None
    if budget is not None:
        budget.spend(min(len(value), MAX_VALUE))
    findings += _check_value(name, variable, value, release, about,
                             MAX_FINDINGS - len(findings))
    return findings


def _unknown(name: str, declared: Mapping[str, EnvValue]) -> list[Finding]:
    """The unknown-value finding of the setting torch reads, when the spec does not hold it
    (the old name when it is set: torch reads it whatever the other says)."""
    variable = CUDA_VARIABLE if CUDA_VARIABLE in declared else GENERIC_VARIABLE
    value = declared[variable]
    if value.known:
        return []
    return [Finding(name, variable, UNKNOWN_VALUE,
                    f"value unknown at admission: {_bounded(value.unknown)}; not checked")]


def _check_value(
    name: str, variable: str, value: str, release: TorchRange, about: str, room: int
) -> list[Finding]:
    """The setting's findings, at most ``room``: past it, the last one counts the rest (only the
    ones shown are worded, so a did-you-mean is searched for at most ``room`` keys)."""
    if len(value) > MAX_VALUE:
        return [Finding(name, variable, NOT_CHECKED,
                        f"{len(value)} characters, over the {MAX_VALUE} checked")]
    issues = check(value, release).issues
    shown_issues = issues if len(issues) <= room else issues[: room - 1]
    findings = []
    for issue in shown_issues:
        hint = _did_you_mean(issue.kind, issue.entry.key if issue.entry else "",
                             issue.entry.value if issue.entry else "", release)
        where = f" ({about})" if issue.kind in _RELEASE_BOUND else ""
        findings.append(Finding(name, variable, issue.kind.value,
                                f"{_bounded(issue.message)}{hint}{where}"))
    if len(shown_issues) < len(issues):
        findings.append(Finding(name, variable, NOT_CHECKED,
                                f"{len(issues) - len(shown_issues)} more findings in this setting "
                                "not shown; gpu-auditor check-alloc-conf lists its problems"))
    return findings


_RELEASE_BOUND: Final = frozenset({IssueKind.UNKNOWN_KEY, IssueKind.NOT_IN_RELEASE})


def _bounded(message: str) -> str:
    """The core's message (it may quote the tenant's key): printable ASCII, at most 200."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in message[:201])
    return clean if len(clean) <= 200 else clean[:197] + "..."


def _did_you_mean(kind: IssueKind, key: str, value: str, release: TorchRange) -> str:
    if kind is IssueKind.UNKNOWN_KEY:
        if len(key) > MAX_HINTED_KEY:
            return ""
        known = [k for k, spec in KEYS.items() if key_available(spec, release)] or list(KEYS)
        match = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.7)
        return f"; did you mean {match[0]}?" if match else ""
    spec = KEYS.get(key)
    if kind is IssueKind.INVALID_VALUE and spec is not None and spec.kind == "bool" and (
        value.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off")
    ):
        wanted = "True" if value.lower() in ("true", "1", "yes", "on") else "False"
        return f"; did you mean {key}:{wanted}?"
    return ""
