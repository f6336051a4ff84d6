"""The indexer: partial admission at K, FIFO service paced by size, obsolescence of waiting documents
only, events in order, the SQLite inverted index, and the time integrals."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from robotctl.crawler import Document, Indexer, IndexerConfig, InvertedIndex, QueueEvent
from robotctl.model import InputError


def doc(url: str, text: str = "alpha beta beta", *, size: int | None = None, expires_at: float | None = None
        ) -> Document:
    body = f"<html><head><title>t</title><script>var hidden=1</script></head><body><p>{text}</p></body></html>"
    if size is not None:
        body = body + " " * max(0, size - len(body))
    return Document(url, body.encode(), 0.0, expires_at, "r1")


def test_config_names_the_field() -> None:
    with pytest.raises(InputError, match=r"^indexer\.capacity:"):
        IndexerConfig(capacity=0)
    with pytest.raises(InputError, match=r"^indexer\.processing_rate_bps:"):
        IndexerConfig.from_dict({"processing_rate_bps": -5})


def test_inverted_index_adds_replaces_and_searches(tmp_path: Path) -> None:
    idx = InvertedIndex(tmp_path / "i.sqlite")
    assert idx.add("http://a/1", "<p>Gamma delta delta</p><script>secret</script>", 10, 0.0) == 2
    idx.add("http://a/2", "<p>delta epsilon</p>", 10, 0.0)
    assert idx.search("delta") == ["http://a/1", "http://a/2"]      # most occurrences first
    assert idx.search("secret") == []                                # script text is not indexed
    idx.add("http://a/1", "<p>zeta</p>", 5, 1.0)                     # a new version replaces the postings
    assert idx.search("gamma") == [] and idx.search("zeta") == ["http://a/1"]
    c = idx.counts()
    assert (c["docs"], c["revisited"], c["versions"]) == (2, 1, 3)
    assert c["postings"] == 3                                         # zeta; delta, epsilon
    idx.close()


async def test_partial_admission_and_fifo_service(tmp_path: Path) -> None:
    events: list[QueueEvent] = []
    ix = Indexer(IndexerConfig(capacity=3, processing_rate_bps=None), db_path=tmp_path / "i.sqlite",
                 on_event=events.append)
    assert ix.offer("r1", [doc("u1"), doc("u2")]) == 2
    assert ix.offer("r2", [doc("u3"), doc("u4"), doc("u5")]) == 1     # one place left: keep the first
    assert ix.length == 3
    task = asyncio.ensure_future(ix.run())
    for _ in range(400):
        if ix.totals.served == 3:
            break
        await asyncio.sleep(0.005)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert [e.kind for e in events] == ["delivery", "delivery", "completion", "completion", "completion"]
    assert [(e.pages, e.admitted, e.length) for e in events[:2]] == [(2, 2, 2), (3, 1, 3)]
    assert [e.length for e in events[2:]] == [2, 1, 0]
    assert events[0].robot == "r1" and events[2].service_s is not None
    t = ix.totals
    assert (t.offered, t.admitted, t.lost, t.served, t.batches) == (5, 3, 2, 3, 2)
    assert sorted(ix.search("beta")) == ["u1", "u2", "u3"]
    assert ix.index_counts()["docs"] == 3
    ix.close()


async def test_service_time_follows_size_at_the_processing_rate(tmp_path: Path) -> None:
    ix = Indexer(IndexerConfig(capacity=4, processing_rate_bps=100_000.0), db_path=":memory:")
    sizes = [2_000, 8_000, 4_000]
    ix.offer("r1", [doc(f"u{i}", size=s) for i, s in enumerate(sizes)])
    task = asyncio.ensure_future(ix.run())
    while ix.totals.served < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    res = asyncio.get_running_loop()._clock_resolution  # type: ignore[attr-defined]
    for s, got in zip(sizes, ix.totals.service_times, strict=True):
        assert got >= s / 100_000.0 - res                 # at least size / rate
    ix.close()


async def test_waiting_documents_go_stale_but_the_one_in_service_does_not(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    events: list[QueueEvent] = []
    ix = Indexer(IndexerConfig(capacity=5, processing_rate_bps=10_000.0), db_path=":memory:",
                 on_event=events.append)
    now = loop.time()
    # the first is served at once (0.3 s) although it expires in 0.05 s; the second expires while waiting
    ix.offer("r1", [doc("first", size=3_000, expires_at=now + 0.05), doc("second", expires_at=now + 0.1),
                    doc("third", expires_at=None)])
    task = asyncio.ensure_future(ix.run())
    while ix.totals.served < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    kinds = [(e.kind, e.length) for e in events]
    assert kinds == [("delivery", 3), ("obsolete", 2), ("completion", 1), ("completion", 0)]
    assert ix.totals.obsolete == 1 and sorted(ix.search("alpha")) == ["first", "third"]
    ix.close()


async def test_time_integrals_cover_the_window(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    ix = Indexer(IndexerConfig(capacity=2, processing_rate_bps=20_000.0), db_path=":memory:")
    ix.start_window()
    start = loop.time()
    await asyncio.sleep(0.05)
    ix.offer("r1", [doc("a", size=1_000)])
    task = asyncio.ensure_future(ix.run())
    while ix.totals.served < 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.02)
    ix.sync()
    elapsed = loop.time() - start
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    lt = ix.stats.level_time
    assert sum(lt) == pytest.approx(elapsed, abs=1e-3)
    assert lt[1] >= 1_000 / 20_000.0 - 1e-3 and lt[0] >= 0.05 and lt[2] == 0.0
    s = ix.stats
    assert s.served == 1 and s.sojourn_sum >= s.service_sum > 0
    ix.close()


async def test_a_stopped_indexer_counts_late_deliveries_in_its_totals_only(tmp_path: Path) -> None:
    """A robot winding down may deliver after the run's measures were read: the window (``stats``) stays
    as measured, the totals (which the agent's counts are compared with) take the delivery."""
    ix = Indexer(IndexerConfig(capacity=2, processing_rate_bps=None), db_path=":memory:")
    ix.start_window()
    ix.offer("r1", [doc("u1"), doc("u2"), doc("u3")])
    ix.stop()
    window = (ix.stats.offered, ix.stats.admitted, ix.stats.lost, ix.stats.batches, list(ix.stats.level_time))
    assert window[:4] == (3, 2, 1, 1)
    await asyncio.sleep(0.01)
    ix.offer("r2", [doc("u4"), doc("u5")])
    ix.sync()
    assert (ix.stats.offered, ix.stats.admitted, ix.stats.lost, ix.stats.batches,
            list(ix.stats.level_time)) == window
    assert (ix.totals.offered, ix.totals.admitted, ix.totals.lost, ix.totals.batches) == (5, 2, 3, 2)
    ix.start_window()                                   # a stopped indexer's new window counts nothing either
    ix.offer("r3", [doc("u6")])
    assert ix.stats.offered == 0 and ix.totals.offered == 6
    ix.close()
