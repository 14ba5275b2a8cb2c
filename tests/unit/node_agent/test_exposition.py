"""/metrics bodies: rendered once per sampling pass, live process metrics added per scrape, gzip
compressed once per pass when a scraper accepts it, and the text format itself (escaping,
numbers) read back by an independent parser."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from node_agent.collector import AgentCollector
from node_agent.exposition import (
    COUNTER,
    GAUGE,
    Exposition,
    Family,
    process_families,
    process_text,
    render,
)
from node_agent.model import Snapshot
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler

from .agent_helpers import GIB, GPU0, StaticGpus, fake_pods, gpu

pytestmark = pytest.mark.unit



def scrape(exposition: Exposition, snapshot: Snapshot, gzip: bool = False
           ) -> tuple[bytes, str, str | None]:
    parts, content_type, encoding = exposition.body(gzip, snapshot)
    return b"".join(parts), content_type, encoding


@pytest.fixture
def setup(proc_root: Path):
    gpus = StaticGpus([gpu(0, GPU0, [])])
    sampler = Sampler("n", gpus, ProcReader(proc_root), fake_pods())
    latest: list[Snapshot] = [sampler.sample()]
    collects: list[int] = []
    scrapes = [0]

    def current() -> Snapshot:
        collects.append(1)
        return latest[-1]

    def live() -> list[Family]:
        return [Family("live_scrapes", "changes on every scrape", GAUGE, (),
                       [((), scrapes[0])])]

    collector = AgentCollector(current, "n")
    return gpus, sampler, latest, collects, Exposition(collector.collect, live), scrapes


def test_a_primed_snapshot_is_served_without_collecting_again(setup) -> None:
    _, _, latest, collects, exposition, _ = setup
    exposition.prime(latest[-1])
    collects.clear()
    for _ in range(3):
        body, content_type, _ = scrape(exposition, latest[-1])
    assert collects == []
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert b'gpu_auditor_gpu_pods{gpu="0",node="n"' in body


def test_a_new_snapshot_is_rendered_afresh(setup) -> None:
    gpus, sampler, latest, _, exposition, _ = setup
    exposition.prime(latest[-1])
    gpus.gpus = [gpu(0, GPU0, [(1, GIB)]), gpu(1, "GPU-x", [])]
    latest.append(sampler.sample())
    body, _, _ = scrape(exposition, latest[-1])
    assert b'uuid="GPU-x"' in body


def test_live_metrics_are_read_on_every_scrape(setup) -> None:
    _, _, latest, _, exposition, scrapes = setup
    exposition.prime(latest[-1])
    scrapes[0] = 1
    first, _, _ = scrape(exposition, latest[-1])
    scrapes[0] = 2
    second, _, _ = scrape(exposition, latest[-1])
    assert b"\nlive_scrapes 1\n" in first and b"\nlive_scrapes 2\n" in second


def test_a_gzip_body_is_one_gzip_member_of_the_same_text(setup) -> None:
    """The pass's text compressed once, the live families added per scrape to a copy of the
    compressor: one member, so a reader that stops after the first (some do) reads it all."""
    _, _, latest, _, exposition, scrapes = setup
    exposition.prime(latest[-1])
    scrapes[0] = 7
    plain, content_type, encoding = scrape(exposition, latest[-1])
    packed, packed_type, packed_encoding = scrape(exposition, latest[-1], gzip=True)
    assert (encoding, packed_encoding, packed_type) == (None, "gzip", content_type)
    reader = zlib.decompressobj(wbits=31)
    assert reader.decompress(packed) == plain and reader.eof and reader.unused_data == b""
    assert gzip.decompress(scrape(exposition, latest[-1], gzip=True)[0]) == plain


def test_gzip_is_compressed_in_the_pass_once_a_scraper_asked_for_it(setup) -> None:
    _, sampler, latest, collects, exposition, _ = setup
    exposition.prime(latest[-1])
    assert exposition.cached(latest[-1]) and not exposition.cached(latest[-1], gzip=True)
    scrape(exposition, latest[-1], gzip=True)  # compresses this pass's text on the scrape
    assert exposition.cached(latest[-1], gzip=True)
    latest.append(sampler.sample())
    exposition.prime(latest[-1])  # and from now on in the sampling thread
    assert exposition.cached(latest[-1], gzip=True)
    collects.clear()
    scrape(exposition, latest[-1], gzip=True)
    assert collects == []


def test_label_values_and_help_are_escaped_and_parse_back() -> None:
    tricky = 'a "quoted" back\\slash\nnew line \u00e9'
    family = Family("x_bytes", "help with \\ and\nnewline", GAUGE, ("v",), [((tricky,), 7)])
    text = render([family]).decode()
    assert text == ('# HELP x_bytes help with \\\\ and\\nnewline\n# TYPE x_bytes gauge\n'
                    'x_bytes{v="a \\"quoted\\" back\\\\slash\\nnew line \u00e9"} 7\n')
    [parsed] = text_string_to_metric_families(text)
    assert parsed.samples[0].labels == {"v": tricky}
    assert parsed.documentation == "help with \\ and\nnewline"


def test_integers_are_exact_and_floats_special_values_are_spelled_as_the_format_says() -> None:
    family = Family("n", "numbers", GAUGE, ("k",), [
        (("max",), 9223372036854775807), (("half",), 0.5), (("nan",), float("nan")),
        (("inf",), float("inf")), (("ninf",), float("-inf")), (("true",), True)])
    lines = render([family]).decode().splitlines()[2:]
    assert lines == ['n{k="max"} 9223372036854775807', 'n{k="half"} 0.5', 'n{k="nan"} NaN',
                     'n{k="inf"} +Inf', 'n{k="ninf"} -Inf', 'n{k="true"} 1']


def test_a_sample_with_the_wrong_number_of_labels_is_refused() -> None:
    family = Family("x_total", "c", COUNTER, ("a", "b"))
    with pytest.raises(ValueError, match="1 label values for 2 labels"):
        family.add(["only-one"], 1)


def test_process_metrics_describe_this_process() -> None:
    families = {f.name: f for f in process_families()}
    assert families["process_cpu_seconds_total"].type == COUNTER
    rss = families["process_resident_memory_bytes"].samples[0][1]
    with open("/proc/self/status") as f:
        vm_rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
    assert 0.5 * vm_rss < rss < 2 * vm_rss
    # the listing's own descriptor is one of those listed; the size of /proc/self/fd (Linux
    # 6.2+: what the agent reads) does not count it
    assert families["process_open_fds"].samples[0][1] in (len(os.listdir("/proc/self/fd")) - 1,
                                                           len(os.listdir("/proc/self/fd")))
    start = families["process_start_time_seconds"].samples[0][1]
    assert abs(start - os.stat(f"/proc/{os.getpid()}").st_mtime) < 3600 * 24 * 365


def test_process_metrics_without_a_readable_proc_are_left_out(tmp_path: Path) -> None:
    assert process_families(str(tmp_path)) == []
    assert process_text(str(tmp_path)) == b""


def test_process_text_is_the_rendered_families(tmp_path: Path) -> None:
    """What /metrics serves per scrape (``process_text``) is ``render(process_families())``
    byte for byte, on a /proc whose figures do not move; and stat is read afresh each time
    through the descriptor kept open."""
    (tmp_path / "self" / "fd").mkdir(parents=True)
    for fd in range(3):
        (tmp_path / "self" / "fd" / str(fd)).touch()
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    fields = ["S"] + ["0"] * 10 + ["250", "50"] + ["0"] * 6 + ["12345", "999424", "300"]
    stat = tmp_path / "self" / "stat"
    stat.write_text(f"42 (agent) {' '.join(fields)}\n")
    text = process_text(str(tmp_path))
    assert text == render(process_families(str(tmp_path)))
    assert b"\nprocess_cpu_seconds_total 3.0\n" in text
    assert b"\nprocess_open_fds 3\n" in text
    with stat.open("r+") as f:  # the same file, new figures: the kept descriptor sees them
        f.write(f"42 (agent) {' '.join(fields).replace('250', '550')}\n")
    assert b"\nprocess_cpu_seconds_total 6.0\n" in process_text(str(tmp_path))


def test_cached_says_whether_this_snapshot_is_rendered(setup) -> None:
    _, sampler, latest, _, exposition, _ = setup
    assert not exposition.cached(latest[-1])
    exposition.prime(latest[-1])
    assert exposition.cached(latest[-1])
    latest.append(sampler.sample())
    assert not exposition.cached(latest[-1])


def test_max_fds_is_the_soft_limit() -> None:
    import resource

    families = {f.name: f for f in process_families()}
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert families["process_max_fds"].samples[0][1] == soft
