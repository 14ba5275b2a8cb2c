"""Chart.yaml's Artifact Hub annotations: they parse, and say what the chart really ships."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chartlib import CHART

pytestmark = pytest.mark.unit

CHANGE_KINDS = {"added", "changed", "deprecated", "removed", "fixed", "security"}


def chart() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "Chart.yaml").read_text()))


def annotation(name: str) -> Any:
    return yaml.safe_load(chart()["annotations"][f"artifacthub.io/{name}"])


def test_the_images_are_the_ones_the_values_default_to() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    proxy = values["agent"]["metricsProxy"]["image"]
    assert annotation("images") == [
        {"name": "gpu-auditor", "image": f"{values['image']['registry']}/"
         f"{values['image']['repository']}:{chart()['appVersion']}"},
        {"name": "kube-rbac-proxy",
         "image": f"{proxy['registry']}/{proxy['repository']}:{proxy['tag']}"},
    ]


def test_the_crds_are_the_chart_crds() -> None:
    crds = [yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))]
    shipped = {(c["spec"]["names"]["kind"], c["metadata"]["name"],
                next(v["name"] for v in c["spec"]["versions"] if v.get("storage")))
               for c in crds}
    assert {(c["kind"], c["name"], c["version"]) for c in annotation("crds")} == shipped


def test_links_changes_and_maintainers_have_the_shape_artifact_hub_reads() -> None:
    assert all({"name", "url"} == set(link) for link in annotation("links"))
    for link in annotation("links"):
        doc = link["url"].split("/blob/main/", 1)[1]
        assert (CHART.parents[1] / doc).is_file(), doc
    assert all(c["kind"] in CHANGE_KINDS and c["description"] for c in annotation("changes"))
    assert chart()["maintainers"] and all(m["name"] for m in chart()["maintainers"])
    assert chart()["annotations"]["artifacthub.io/category"] == "monitoring-logging"
