"""A local_docker job's state from its containers and its end record (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from torchx_ext.schedulers.common.states import State
from torchx_ext.schedulers.common.states import JobEnd
from torchx_ext.schedulers.docker.view import ContainerView, end_from_labels, end_labels, engine_time, read_job

RUNNING = ContainerView("a-r-0", "r", 0, "running", None, 100.0, None, 0, 0)


def exited(replica_id: int, code: int, finished: float, restarts: int = 0, max_retries: int = 0) -> ContainerView:
    return ContainerView(f"a-r-{replica_id}", "r", replica_id, "exited", code, 100.0, finished, restarts, max_retries)


def test_no_containers_is_no_app() -> None:
    assert read_job([], None).state is None


def test_all_exited_zero_succeeded() -> None:
    assert read_job([exited(0, 0, 110), exited(1, 0, 111)], None).state is State.SUCCEEDED


def test_one_failed_for_good_fails_the_job_and_asks_to_be_ended() -> None:
    view = read_job([replace(RUNNING, replica_id=0), exited(1, 7, 110)], None)

    assert view.state is State.FAILED and view.unended
    assert view.failing is not None and view.failing.key == "r/1"


def test_after_the_end_only_the_failing_replica_is_failed_the_stopped_ones_cancelled() -> None:
    end = JobEnd(State.FAILED, 110.0, "replica r/1 exited with code 7", replica="r/1")
    view = read_job([exited(0, 143, 110.5), exited(1, 7, 110.0)], end)

    assert view.state is State.FAILED and not view.unended
    assert view.replicas == {("r", 0): State.CANCELLED, ("r", 1): State.FAILED}


@pytest.mark.parametrize("codes", [(0, 0), (137, 143), (1, 0)])
def test_a_cancelled_job_is_cancelled_whatever_its_containers_exited_with(codes: tuple[int, int]) -> None:
    end = JobEnd(State.CANCELLED, 109.0, "cancelled by request")
    view = read_job([exited(0, codes[0], 110), exited(1, codes[1], 110)], end)

    assert view.state is State.CANCELLED


def test_a_failure_with_restarts_left_is_still_running() -> None:
    view = read_job([exited(0, 1, 110, restarts=0, max_retries=2)], None)

    assert view.state is State.RUNNING and not view.unended
    assert read_job([exited(0, 1, 110, restarts=2, max_retries=2)], None).state is State.FAILED


def test_created_not_started_is_pending_and_a_start_failure_is_failed() -> None:
    created = ContainerView("a-r-0", "r", 0, "created", None, None, None, 0, 0)
    assert read_job([created], None).state is State.PENDING
    broken = replace(created, exit_code=127, engine_error='exec: "pythn": executable file not found in $PATH')
    assert read_job([broken], None).state is State.FAILED


def test_the_earliest_failure_is_the_root_cause() -> None:
    view = read_job([exited(0, 1, 112), exited(1, 7, 110)], None)

    assert view.failing is not None and view.failing.replica_id == 1


def test_end_labels_round_trip() -> None:
    end = JobEnd(State.FAILED, 1700000000.25, "message", replica="r/1")
    assert end_from_labels(end_labels(end)) == end
    assert end_from_labels({"other": "x"}) is None


def test_engine_times() -> None:
    assert engine_time("0001-01-01T00:00:00Z") is None
    assert engine_time("2026-11-22T10:44:28.921837315Z") == pytest.approx(1795344268.921837315)
    assert engine_time("2026-11-22T10:44:28Z") == pytest.approx(1795344268.0)
    assert engine_time("2026-11-22T11:44:28.5+01:00") == pytest.approx(1795344268.5)


def test_inspect_json_of_a_stopped_container() -> None:
    attrs = {
        "Name": "/app-x-r-1",
        "RestartCount": 1,
        "State": {"Status": "exited", "ExitCode": 7, "StartedAt": "2026-11-22T10:44:28Z",
                  "FinishedAt": "2026-11-22T10:44:30Z", "OOMKilled": False, "Error": ""},
        "Config": {"Labels": {"torchx_ext.role": "r", "torchx_ext.replica_id": "1", "torchx_ext.max_retries": "2"}},
    }
    view = ContainerView.from_inspect(attrs)

    assert (view.name, view.key, view.exit_code, view.restarts, view.max_retries) == ("app-x-r-1", "r/1", 7, 1, 2)


def test_a_containers_role_policy_is_read_back_from_the_one_label_it_was_created_with() -> None:
    from torchx_ext.components.dist import ddp
    from torchx_ext.schedulers.docker.request import build_request

    app = ddp(script="t.py", j="1:3x1", max_retries=2)
    created = build_request(app, app_id="t-abcd1234", topology=None).containers[2]
    view = ContainerView.from_inspect({"Name": f"/{created.name}", "State": {"Status": "running"},
                                       "Config": {"Labels": created.labels_on_engine()}})

    assert (view.key, view.role_replicas, view.min_replicas, view.max_retries) == ("t/2", 3, 1, 2)
    assert [key for key in created.labels_on_engine() if "replicas" in key or "retries" in key] == []


def _elastic(view: ContainerView, minimum: int, size: int) -> ContainerView:
    return replace(view, min_replicas=minimum, role_replicas=size)


def test_an_elastic_role_carries_on_without_a_lost_replica_while_it_keeps_min_replicas() -> None:
    survivor = _elastic(replace(exited(0, 0, 5.0), status="running", exit_code=None, finished_at=None), 1, 2)
    lost = _elastic(exited(1, 137, 5.0), 1, 2)

    running = read_job([survivor, lost], None)
    assert running.state is State.RUNNING and not running.unended
    assert running.replicas[("r", 1)] is State.FAILED

    assert read_job([_elastic(exited(0, 0, 9.0), 1, 2), lost], None).state is State.SUCCEEDED


def test_an_elastic_role_that_falls_below_min_replicas_fails() -> None:
    views = [_elastic(exited(0, 1, 5.0), 2, 3), _elastic(exited(1, 137, 4.0), 2, 3),
             _elastic(replace(exited(2, 0, 0.0), status="running", exit_code=None, finished_at=None), 2, 3)]

    view = read_job(views, None)
    assert view.state is State.FAILED and view.unended and view.failing is not None
