"""schedulers/common: states and their moves, log queries, app ids, the error-file shape."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchx_ext.errors import InvalidArgumentError, StateTransitionError
from torchx_ext.schedulers.common.app_ids import CONTAINER_NAME_IDS, DNS_LABEL_IDS, FILE_NAME_IDS, AppIdRules, new_app_id
from torchx_ext.error_file import ErrorReport, parse_error_report, read_error_file, write_error_file
from torchx_ext.schedulers.common.logs import LogQuery
from torchx_ext.schedulers.common.states import JOB_MOVES, REPLICA_MOVES, State, app_state, job_move, job_state_from_replicas, replica_move

S = State


@pytest.mark.parametrize("old,new", [(S.PENDING, S.RUNNING), (S.RUNNING, S.RUNNING), (S.RUNNING, S.FAILED), (S.PENDING, S.CANCELLED)])
def test_replica_moves_that_happen(old: State, new: State) -> None:
    assert replica_move(old, new) is new


@pytest.mark.parametrize("old", sorted(S, key=str))
def test_terminal_states_are_final(old: State) -> None:
    for new in S:
        if old.terminal:
            with pytest.raises(StateTransitionError, match=f"in state {old} cannot become {new}.*final"):
                replica_move(old, new)
            with pytest.raises(StateTransitionError):
                job_move(old, new)
    assert old.terminal == (old not in REPLICA_MOVES and old not in JOB_MOVES)


def test_a_job_cannot_go_back_to_submitted() -> None:
    with pytest.raises(StateTransitionError, match="job in state RUNNING cannot become SUBMITTED: .*CANCELLED, FAILED, SUCCEEDED"):
        job_move(S.RUNNING, S.SUBMITTED)


@pytest.mark.parametrize(
    "replicas,cancelled,expected",
    [
        ([], False, None),  # nothing found: the app does not exist
        ([], True, None),
        ([S.SUCCEEDED, S.SUCCEEDED], False, S.SUCCEEDED),
        ([S.SUCCEEDED, S.FAILED], False, S.FAILED),
        ([S.FAILED, S.CANCELLED], False, S.FAILED),  # a failure stopped the others
        ([S.FAILED, S.SUCCEEDED], True, S.CANCELLED),  # cancelled: whatever they exited with
        ([S.SUCCEEDED, S.SUCCEEDED], True, S.CANCELLED),
        ([S.RUNNING, S.FAILED], True, S.RUNNING),  # still stopping
        ([S.PENDING, S.RUNNING], False, S.RUNNING),
        ([S.PENDING, S.PENDING], False, S.PENDING),
        ([S.PENDING, S.SUCCEEDED], False, S.RUNNING),
    ],
)
def test_job_state_from_replicas(replicas: list[State], cancelled: bool, expected: State | None) -> None:
    assert job_state_from_replicas(replicas, cancelled) is expected


def test_every_state_has_its_torchx_app_state() -> None:
    from torchx.specs import AppState

    assert [app_state(state) for state in S] == [AppState[state.value] for state in S]
    assert app_state(None) == AppState.UNKNOWN


def test_log_query_refuses_bad_input_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match=r"invalid log regex '\(': .*"):
        LogQuery.of(regex="(")
    with pytest.raises(InvalidArgumentError, match="unknown stream 'stdin': valid values are stdout, stderr, combined"):
        LogQuery.of(streams="stdin")
    early, late = datetime.datetime(2026, 1, 1), datetime.datetime(2026, 1, 2)
    with pytest.raises(InvalidArgumentError, match="ends .* before it starts"):
        LogQuery.of(since=late, until=early)


def test_log_query_selects_by_time_and_regex() -> None:
    from torchx.schedulers.api import Stream

    start = datetime.datetime(2026, 1, 1, 12, 0, 0)
    query = LogQuery.of(regex="^keep", since=start, until=start + datetime.timedelta(seconds=10), streams=Stream.STDERR)
    lines = [(start.timestamp() - 1, "keep early\n"), (start.timestamp() + 1, "keep 1\n"),
             (start.timestamp() + 2, "drop\n"), (start.timestamp() + 11, "keep late\n")]

    assert query.stream == "stderr"
    assert list(query.select(lines)) == ["keep 1\n"]
    assert LogQuery.of().stream == "combined"


RULES = [FILE_NAME_IDS, CONTAINER_NAME_IDS, DNS_LABEL_IDS]


@pytest.mark.parametrize("rules", RULES, ids=lambda rules: rules.kind)
@given(name=st.text(max_size=300))
def test_any_name_gives_a_valid_id_for_every_backend(rules: AppIdRules, name: str) -> None:
    app_id = new_app_id(name, rules)

    assert rules.matches(app_id), app_id
    assert len(app_id) <= rules.max_length


def test_kubernetes_ids_are_dns_labels_that_keep_the_readable_name() -> None:
    app_id = new_app_id("My_Train.Job " + "x" * 100, DNS_LABEL_IDS, suffix="abc12345")

    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", app_id) and len(app_id) == 40
    assert app_id.startswith("my-train-job-xxx") and app_id.endswith("-abc12345")
    assert new_app_id("0-starts-with-digit", DNS_LABEL_IDS, suffix="s").startswith("starts-with-digit")
    assert new_app_id("___", FILE_NAME_IDS, suffix="s") == "app-s"


def test_ids_are_unique() -> None:
    assert len({new_app_id("train", DNS_LABEL_IDS) for _ in range(1000)}) == 1000


def test_error_reports_written_by_torch_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torchelastic's own writer is the oracle for the shape.
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    try:
        raise RuntimeError("loss is nan")
    except RuntimeError as error:
        ErrorHandler().record_exception(error)

    report = read_error_file(path)

    assert report is not None and "loss is nan" in report.message
    assert "RuntimeError" in report.traceback and report.timestamp is not None


def test_written_reports_keep_the_first_failure_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    first = ErrorReport(message="rank 3 (local rank 1) exited with code 7", error_code=7, timestamp=1700000000)

    assert write_error_file(path, first)
    assert not write_error_file(path, ErrorReport(message="a later failure"))
    assert read_error_file(path) == first
    assert json.loads(path.read_text())["message"]["errorCode"] == 7
    latest = ErrorReport(message="this run's failure", error_code=1, timestamp=1700000001)
    assert write_error_file(path, latest, replace=True) and read_error_file(path) == latest
    assert read_error_file(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert read_error_file(tmp_path / "bad.json") is None


def test_a_cut_report_still_gives_its_message() -> None:
    # Kubernetes keeps 4 KiB of a termination message; the message comes before the traceback.
    report = json.dumps({"message": {"message": "loss is nan", "extraInfo": {"py_callstack": "x" * 5000}}})
    parsed = parse_error_report(report[:4096])
    assert parsed is not None and parsed.message == "loss is nan"
    assert parse_error_report(report[:20]) is None
    assert parse_error_report(b"Traceback (most recent call last):") is None


def test_describe_response_groups_replicas_by_role_and_gives_every_backend_one_no_error_placeholder() -> None:
    from torchx.specs import AppState, Role

    from torchx_ext.schedulers.common.scheduler import NO_ERROR, JobView, ReplicaReport, describe_response

    failure = ErrorReport(message="replica reader/0 exited with code 7", error_code=7, timestamp=5)
    response = describe_response(JobView(
        "app-1", State.FAILED,
        roles=[Role(name="trainer", image="img", num_replicas=2), Role(name="reader", image="img", num_replicas=1)],
        replicas=[ReplicaReport("trainer", 1, State.CANCELLED, "h1"),
                  ReplicaReport("reader", 0, State.FAILED, "h2", failure),
                  ReplicaReport("trainer", 0, None, "h0")],
        error=failure, num_restarts=2, message="failed"))

    assert response.state is AppState.FAILED and response.num_restarts == 2
    assert [(role.role, [(replica.id, replica.state) for replica in role.replicas])
            for role in response.roles_statuses] == [
        ("trainer", [(0, AppState.UNKNOWN), (1, AppState.CANCELLED)]), ("reader", [(0, AppState.FAILED)])]
    assert [replica.structured_error_msg for role in response.roles_statuses for replica in role.replicas] == [
        NO_ERROR, NO_ERROR, failure.to_json()]
    assert parse_error_report(response.structured_error_msg) == failure


def test_every_backends_message_is_its_own_word_or_the_restarts_then_while_running_elastic_roles_and_spares() -> None:
    from torchx.specs import Role

    from torchx_ext.schedulers.common.scheduler import JobView, ReplicaReport

    roles = [Role(name="trainer", image="img", num_replicas=3, min_replicas=1),
             Role(name="spared", image="img", num_replicas=3, min_replicas=2)]
    replicas = [ReplicaReport("trainer", 0, State.RUNNING, "h"), ReplicaReport("trainer", 1, State.RUNNING, "h"),
                ReplicaReport("trainer", 2, State.FAILED, "h"), *(ReplicaReport("spared", k, State.RUNNING, "h")
                                                                  for k in range(3))]
    running = JobView("a", State.RUNNING, roles, replicas, num_restarts=1, last_failure="replica trainer/2 exited "
                      "with code 1", spares=[("spared", 2)], elastic={"trainer": 1})
    assert running.summary() == ("1 restart, the last after replica trainer/2 exited with code 1; role trainer runs 2 "
                                 "of 1..3 replicas; 1 hot spare waiting: spared[2]")
    ended = JobView("a", State.FAILED, roles, replicas, num_restarts=1, message="replica trainer/0 exited with code 9",
                    spares=[("spared", 2)], elastic={"trainer": 1})
    assert ended.summary() == "replica trainer/0 exited with code 9"
    assert JobView("a", State.RUNNING, roles, replicas).summary() == ""
