"""dist.hsdp's AppDef (a lighthouse role, then one role per replica group on our launcher), the
errors it gives before anything runs, torchft's durations, and how the lighthouse and the groups
agree that the job is done (real HTTP on loopback)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time

import pytest
from torchx import specs
from torchx.specs import macros

from tests.helpers import free_port, free_port_pair
from torchx_ext.components.dist import hsdp
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.ft import ending_port
from torchx_ext.ft.durations import parse_ms
from torchx_ext.ft.ending import BYE, END, WAIT, EndBook, EndServer, check_the_lighthouse, wait_for_the_end
from torchx_ext.role_metadata import TORCHFT_KEY

# Skipped where the ft extra is missing, but never under CI=true: scripts/test.sh installs it.
needs_torchft = pytest.mark.skipif(os.environ.get("CI") != "true" and importlib.util.find_spec("torchft") is None,
                                   reason="the ft extra (pip install 'torchx_ext[ft]') is not installed")


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@needs_torchft
def test_the_lighthouse_comes_first_so_every_groups_rank0_host_is_its_host() -> None:
    app = hsdp("--lr", "0.1 $HOME", script="train.py", replicas=3, workers_per_replica=2, min_replicas=2,
               heartbeat_timeout="500ms", lighthouse_port=29600)
    assert [role.name for role in app.roles] == ["lighthouse", "replica_0", "replica_1", "replica_2"]
    lighthouse, *groups = app.roles
    assert lighthouse.args[:2] == ["-m", "torchx_ext.ft.lighthouse"] and flag(lighthouse.args, "--job") == macros.app_id
    assert (flag(lighthouse.args, "--groups"), flag(lighthouse.args, "--min-replicas"),
            flag(lighthouse.args, "--port"), flag(lighthouse.args, "--heartbeat-timeout-ms")) == ("3", "2", "29600", "500")
    assert lighthouse.num_replicas == 1 and lighthouse.metadata[TORCHFT_KEY] == "lighthouse"
    for index, group in enumerate(groups):
        assert group.args[:2] == ["-m", "torchx_ext.launcher"]
        assert flag(group.args, "--torchft-lighthouse-env") == macros.rank0_env
        assert flag(group.args, "--torchft-lighthouse-port") == "29600"
        assert flag(group.args, "--torchft-job") == macros.app_id  # it checks that the lighthouse is its job's
        assert flag(group.args, "--rdzv-id") == f"{macros.app_id}-replica_{index}"  # a rendezvous of its own
        assert flag(group.args, "--nproc-per-node") == "2" and flag(group.args, "--max-restarts") == "10"
        assert group.env["REPLICA_GROUP_ID"] == str(index) and group.env["NUM_REPLICA_GROUPS"] == "3"
        assert group.args[-3:] == ["train.py", "--lr", "0.1 $$HOME"]  # torchx gives back "$"
        assert group.retry_policy == specs.RetryPolicy.REPLICA and group.metadata[TORCHFT_KEY] == "group"


@needs_torchft
def test_groups_of_several_nodes_rendezvous_at_their_own_replica_0() -> None:
    app = hsdp(script="train.py", replicas=2, j="2x4")
    group = app.roles[1]
    assert group.num_replicas == 2 and flag(group.args, "--nnodes") == "2"
    assert flag(group.args, "--rdzv-endpoint-env") == macros.rank0_env  # the launcher prefers the role's own host
    assert flag(group.args, "--node-rank") == macros.replica_id


@needs_torchft
@pytest.mark.parametrize(("given", "says"), [
    ({"replicas": 0}, "invalid --replicas 0: expected 1 or more replica groups"),
    ({"replicas": 2, "min_replicas": 3}, "invalid --min_replicas 3: expected 1 to 2"),
    ({"min_replicas": 0}, "invalid --min_replicas 0"),
    ({"heartbeat_timeout": "0s"}, "invalid --heartbeat_timeout '0s': expected a positive duration with its unit"),
    ({"heartbeat_timeout": "1000"}, "invalid --heartbeat_timeout '1000'"),
    ({"heartbeat_timeout": "-1s"}, "invalid --heartbeat_timeout '-1s'"),
    ({"quorum_tick": "soon"}, "invalid --quorum_tick 'soon'"),
    ({"j": "1:2x1"}, "a replica group has a fixed size"),
    ({"j": "2x2", "workers_per_replica": 4}, "not both"),
    ({"workers_per_replica": 0}, "invalid --workers_per_replica 0"),
    ({"lighthouse_port": 65535}, "invalid --lighthouse_port 65535"),
    ({"max_restarts": -1}, "invalid --max_restarts -1"),
    ({"rdzv_port": 29511}, "--rdzv_port 29511 is one of the lighthouse's ports"),
])
def test_bad_input_is_refused_in_one_line_naming_the_value(given: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidArgumentError) as error:
        hsdp(script="train.py", **given)  # type: ignore[arg-type]
    assert says in str(error.value) and "\n" not in str(error.value)


def test_without_torchft_the_component_says_how_to_install_it() -> None:
    # As on a machine without the extra: the import system finds no torchft.
    code = ("import sys; sys.modules['torchft'] = None\n"
            "from torchx_ext.components.dist import hsdp\n"
            "try:\n    hsdp(script='train.py')\nexcept ValueError as error:\n    print(error)")
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert said == "dist.hsdp runs torchft jobs, and torchft is not installed here: pip install 'torchx_ext[ft]'\n"


@pytest.mark.parametrize(("text", "ms"), [("1s", 1000), ("500ms", 500), ("1.5s", 1500), ("2m", 120000),
                                          (" 100MS ", 100), (".5s", 500)])
def test_durations_with_their_unit(text: str, ms: int) -> None:
    assert parse_ms(text, "--x") == ms


def test_the_end_book_ends_every_group_once_all_are_done() -> None:
    book = EndBook(groups=2)
    assert book.report(0) == WAIT and book.report(0) == WAIT
    assert book.report(1) == END and not book.everyone_told
    assert book.report(0) == BYE and book.everyone_told
    assert book.report(1, ended=True) == BYE


def test_a_lighthouse_started_again_learns_from_one_ended_group_that_every_group_was_done() -> None:
    book = EndBook(groups=3)  # the new lighthouse: group 2 heard END from the old one and went on asking
    assert book.report(0) == WAIT
    assert book.report(2, ended=True) == END
    assert book.report(0) == END and book.report(1) == BYE


def _done_group(port: int, index: int, ended: list[int], after_end_s: float) -> threading.Thread:
    """A done group waiting for the end (started); ``ended`` gets its index once it may exit."""
    def wait() -> None:
        wait_for_the_end("127.0.0.1", port, index, poll_s=0.05, after_end_s=after_end_s)
        ended.append(index)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


def test_done_groups_keep_telling_a_lighthouse_started_again_until_it_ends_them() -> None:
    port = free_port()
    first = EndServer(port, groups=2, job="app-1", host="127.0.0.1")
    first.start()
    ended: list[int] = []
    early = _done_group(port, 0, ended, after_end_s=5)
    time.sleep(0.3)  # group 0 done and waiting; then the lighthouse is lost and started again
    first.stop()
    time.sleep(0.3)
    second = EndServer(port, groups=2, job="app-1", host="127.0.0.1")
    second.start()
    late = _done_group(port, 1, ended, after_end_s=5)
    assert second.wait_until_everyone_told(timeout_s=10)
    early.join(10)
    late.join(10)
    second.stop()
    assert sorted(ended) == [0, 1]


def test_a_group_that_heard_the_end_tells_a_lighthouse_started_again_so_the_others_end_too() -> None:
    port = free_port()
    first = EndServer(port, groups=2, job="app-1", host="127.0.0.1")
    first.start()
    assert first.answer(0, ended=False) == WAIT
    ended: list[int] = []
    told = _done_group(port, 1, ended, after_end_s=10)  # group 1 hears END from the first lighthouse, which is lost before group 0 asks again
    deadline = time.monotonic() + 5
    while 1 not in first.book.told and time.monotonic() < deadline:
        time.sleep(0.01)
    first.stop()
    second = EndServer(port, groups=2, job="app-1", host="127.0.0.1")
    second.start()
    waiting = _done_group(port, 0, ended, after_end_s=10)
    assert second.wait_until_everyone_told(timeout_s=10)
    waiting.join(10)
    told.join(10)
    second.stop()
    assert sorted(ended) == [0, 1]


def test_a_group_refuses_another_jobs_lighthouse_in_one_line() -> None:
    port = free_port_pair()
    other = EndServer(ending_port(port), groups=2, job="other-job", host="127.0.0.1")
    other.start()
    try:
        check_the_lighthouse("127.0.0.1", ending_port(port), "other-job", timeout_s=5)
        with pytest.raises(InvalidArgumentError) as error:
            check_the_lighthouse("127.0.0.1", ending_port(port), "my-job", timeout_s=5)
    finally:
        other.stop()
    assert str(error.value) == (f"the torchft lighthouse at 127.0.0.1:{port} is job 'other-job''s, not 'my-job''s: "
                                "jobs that share a host need different ports (dist.hsdp --lighthouse_port)")
    with pytest.raises(InvalidArgumentError, match="no torchft lighthouse answered"):
        check_the_lighthouse("127.0.0.1", ending_port(free_port_pair()), "my-job", timeout_s=0.3, poll_s=0.05)


@needs_torchft
def test_on_kubernetes_the_opt_in_network_policy_lets_the_lighthouse_and_every_group_reach_each_other() -> None:
    from torchx_ext.schedulers.kubernetes.options import ManifestOptions
    from torchx_ext.schedulers.kubernetes.request import build_request

    app = hsdp(script="train.py", replicas=2, image="registry.local/train:1")
    request = build_request(app, app_id="ft-abc12345", options=ManifestOptions(network_policy=True))
    policy, _service, *jobs = request.objects
    assert policy["kind"] == "NetworkPolicy" and [job["metadata"]["name"] for job in jobs] == [
        "ft-abc12345-lighthouse", "ft-abc12345-replica-0", "ft-abc12345-replica-1"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]
    for job in jobs:  # each role's pods are the policy's: selected, and let in by it
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
    # Every group's pods learn the lighthouse's host: the first role's pod 0, under the Service.
    for job in jobs[1:]:
        env = {item["name"]: item.get("value") for item in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["TORCHX_RANK0_HOST"] == "ft-abc12345-lighthouse-0.ft-abc12345"


@needs_torchft
@pytest.mark.parametrize("backend", ["jobset", "volcano"])
def test_kubernetes_backends_that_restart_every_pod_refuse_a_torchft_job_in_one_line(backend: str) -> None:
    from torchx_ext.schedulers.kubernetes.options import ManifestOptions
    from torchx_ext.schedulers.kubernetes.request import build_request

    app = hsdp(script="train.py", replicas=2, image="registry.local/train:1")
    with pytest.raises(InvalidArgumentError) as error:
        build_request(app, app_id="ft-abc12345", options=ManifestOptions(backend=backend))
    assert str(error.value) == (
        f"a torchft job (dist.hsdp) needs each replica group started again alone, and backend={backend} restarts "
        "every pod when a group's Job fails: kubernetes runs torchft jobs with -cfg backend=job")


@needs_torchft
def test_local_cwd_refuses_torchft_groups_of_several_nodes_which_would_share_its_one_store() -> None:
    from torchx_ext.schedulers.local.build import check_torchft_groups

    check_torchft_groups(hsdp(script="train.py", replicas=2, workers_per_replica=2))
    with pytest.raises(InvalidArgumentError) as error:
        check_torchft_groups(hsdp(script="train.py", replicas=2, j="2x1"))
    assert "local_cwd runs each torchft replica group on one node" in str(error.value)
