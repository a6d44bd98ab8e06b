"""What the rig's sweep step decides around its run: which load options it passes, which runs a fetched folder
holds, a replica sent requests that answered none (one sent nothing is not one), a search failed with its server."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from core.rundir.capacity_search import CapacitySearch, SearchProbe, SearchResult, read_search, write_search
from provision.sweep import fail_search, runs_under, unanswered_replicas


def run_with(kit: SimpleNamespace, run_id: str, answers: list[tuple[int, str | None]]) -> Path:
    """A complete run whose records went to ``(replica, error_kind)``."""
    records = [kit.record(f"r{number}", t_start=kit.T0 + 101 + number, error_kind=error).model_copy(
        update={"replica": replica}) for number, (replica, error) in enumerate(answers)]
    return kit.make_run(run_id, [kit.window()], {"p0": records})


def test_a_replica_sent_nothing_is_not_a_replica_that_answered_nothing(kit: SimpleNamespace) -> None:
    one_user = run_with(kit, "one-user", [(0, None), (0, None)])
    dead = run_with(kit, "dead", [(0, None), (1, "connect"), (1, "connect")])
    assert unanswered_replicas([one_user], 2) == []
    assert unanswered_replicas([dead], 2) == ["replica 1 answered none of the 2 requests of dead sent to it"]
    assert unanswered_replicas([dead], 1) == [], "one server: the sweep's own error checks judge it"


def test_the_runs_under_a_fetched_folder(kit: SimpleNamespace, tmp_path: Path) -> None:
    search = tmp_path / "search"
    search.mkdir()
    probe = run_with(kit, "probe", [(0, None)]).rename(search / "probe")  # a search's folder holds its probes
    (tmp_path / "empty").mkdir()
    assert runs_under(probe) == [probe] and runs_under(search) == [probe]
    assert runs_under(tmp_path / "empty") == [] and runs_under(tmp_path / "missing") == []


@pytest.mark.integration
def test_a_search_whose_server_failed_under_it_says_so_here_and_on_the_rig(rig, rig_paths, tmp_path: Path) -> None:
    met = CapacitySearch(search_id="s1", created_at="2026-12-03T00:00:00+00:00", mode="users",
                         targets={"ttft_p90": 1.0}, first_load=2, resolution=1,
                         probes=[SearchProbe(load=2, run_id="probe-2", status="complete", meets=True)],
                         result=SearchResult(largest_meeting=2, smallest_missing=None, reason="max_load_met",
                                             detail="every probe met"))
    remote, local = Path(rig_paths.runs) / "s1", tmp_path / "runs" / "s1"
    for folder in (remote, local):
        folder.mkdir(parents=True)
        write_search(folder, met)
    fail_search(rig, rig_paths, local, "replica 1 exited")
    for folder in (local, remote):
        search = read_search(folder)
        assert search.result.reason == "probe_failed" and search.result.largest_meeting is None
        assert search.result.detail == "the server failed under the search: replica 1 exited"
        assert [(probe.status, probe.meets) for probe in search.probes] == [("failed", False)]
