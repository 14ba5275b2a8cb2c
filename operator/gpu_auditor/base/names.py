"""Kubernetes names as the API server defines them, and request paths built only from them.

Every name that goes into a request path comes from an object a tenant wrote (a pod's owner
reference, a node report's finding): it is validated here first, and every path segment is
escaped with nothing left safe, so no name can climb out of its collection (`../`) or add a
query. Rules from k8s.io/apimachinery/pkg/util/validation: a DNS-1123 label (namespaces,
container names) and a DNS-1123 subdomain (pods, workloads, nodes).
"""

from __future__ import annotations

import re
from urllib.parse import quote

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[0-9A-Za-z-]{1,64}")


class InvalidName(ValueError):
    """A name that is not a valid Kubernetes name of its kind: never sent to the API server."""


def is_label(name: object) -> bool:
    """A DNS-1123 label: at most 63 of [a-z0-9-], alphanumeric at both ends."""
    return isinstance(name, str) and len(name) <= LABEL_MAX and bool(_LABEL.fullmatch(name))


def is_subdomain(name: object) -> bool:
    """A DNS-1123 subdomain: at most 253 characters, labels joined by dots."""
    return (isinstance(name, str) and len(name) <= SUBDOMAIN_MAX
            and bool(_SUBDOMAIN.fullmatch(name)))


def is_uid(uid: object) -> bool:
    """A UID as the API server assigns them (a UUID), or a like token: letters, digits, dashes,
    at most 64."""
    return isinstance(uid, str) and bool(_UID.fullmatch(uid))


def namespace(name: object) -> str:
    if not is_label(name):
        raise InvalidName(f"not a namespace name: {shown(name)}")
    return str(name)


def object_name(name: object) -> str:
    if not is_subdomain(name):
        raise InvalidName(f"not an object name: {shown(name)}")
    return str(name)


def segment(text: str) -> str:
    """One path segment, every reserved character escaped (`/` included)."""
    return quote(text, safe="")


def shown(name: object, limit: int = 80) -> str:
    text = repr(name)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
