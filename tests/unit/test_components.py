"""The AppDefs dist.ddp and dist.spmd build, and the errors they give, before anything runs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from torchx import specs
from torchx.specs import macros

from torchx_ext.components.dist import TORCH_DEBUG_FLAGS, ddp, parse_j, spmd
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.role_metadata import SPARES_KEY


def role_of(app: specs.AppDef) -> specs.Role:
    assert len(app.roles) == 1
    return app.roles[0]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize(
    ("j", "parsed"),
    [("2x4", (2, 2, 4)), ("2:5x8", (2, 5, 8)), ("4", (1, 1, 4)), ("1x1", (1, 1, 1)), (" 3x2 ", (3, 3, 2))],
)
def test_j_forms(j: str, parsed: tuple[int, int, int]) -> None:
    assert parse_j(j) == parsed


@pytest.mark.parametrize("j", ["1x", "x2", ":3", ":2x1", "1x2:3", "0x2", "3:2x1", "-1", "2x0", "0", "", "1x2x3", "a"])
def test_malformed_j_names_the_value_and_the_forms(j: str) -> None:
    with pytest.raises(InvalidArgumentError) as error:
        ddp(script="train.py", j=j)
    assert repr(j) in str(error.value) and "2:5x8" in str(error.value)


def test_single_node_job_runs_our_launcher_on_a_free_port() -> None:
    role = role_of(ddp("--lr", "0.1", script="train.py", j="1x4"))
    assert role.entrypoint == "python"
    assert role.args[:2] == ["-m", "torchx_ext.launcher"]
    assert flag(role.args, "--rdzv-endpoint") == "localhost:0"
    assert flag(role.args, "--nnodes") == "1" and flag(role.args, "--nproc-per-node") == "4"
    assert flag(role.args, "--rdzv-id") == macros.app_id
    assert flag(role.args, "--numa-binding") == "auto" and flag(role.args, "--omp-threads") == "auto"
    assert role.args[-3:] == ["train.py", "--lr", "0.1"]
    assert "bash" not in role.entrypoint and "-c" not in role.args[:2]
    assert (role.num_replicas, role.min_replicas) == (1, 1)


def test_multi_node_job_takes_the_rendezvous_host_from_the_schedulers_rank0_env() -> None:
    role = role_of(ddp(script="train.py", j="2:5x8", rdzv_port=29999, h="dgx_h100"))
    assert flag(role.args, "--rdzv-endpoint-env") == macros.rank0_env
    assert flag(role.args, "--rdzv-port") == "29999"
    assert "--rdzv-endpoint" not in role.args
    assert flag(role.args, "--nnodes") == "2:5"
    assert (role.min_replicas, role.num_replicas) == (2, 5)
    assert role.port_map == {"c10d": 29999}


def test_dist_roles_ask_for_replica_retries_and_take_torchx_metadata() -> None:
    for component in (ddp(script="train.py", j="2x1", metadata={"kubernetes": "file:///o.yaml"}),
                      spmd(script="train.py", j="2x1", metadata={"kubernetes": "file:///o.yaml"})):
        role = role_of(component)
        assert role.retry_policy == specs.RetryPolicy.REPLICA  # the launcher re-rendezvouses with a new replica
        assert role.metadata["kubernetes"] == "file:///o.yaml"


def test_static_rendezvous_passes_the_node_rank_and_rdzv_conf() -> None:
    role = role_of(ddp(script="train.py", j="2x2", rdzv_backend="static", rdzv_conf="join_timeout=60"))
    assert flag(role.args, "--rdzv-backend") == "static"
    assert flag(role.args, "--node-rank") == macros.replica_id
    assert flag(role.args, "--rdzv-conf") == "join_timeout=60"


def test_static_rendezvous_on_one_node_leaves_the_port_to_the_launcher() -> None:
    role = role_of(ddp(script="train.py", j="1x2", rdzv_backend="static"))
    assert "--rdzv-endpoint" not in role.args and flag(role.args, "--node-rank") == macros.replica_id


def test_tee_is_passed_on() -> None:
    assert flag(role_of(ddp(script="t.py", tee=1)).args, "--tee") == "1"
    assert flag(role_of(spmd(script="t.py")).args, "--tee") == "3"


def test_module_entrypoint_and_numa_flags() -> None:
    role = role_of(ddp("x", m="pkg.trainer", numa_binding="exclusive", numa_strict=True, omp_threads="4"))
    assert role.name == "trainer"
    assert role.args[-3:] == ["-m", "pkg.trainer", "x"]
    assert "--numa-strict" in role.args and flag(role.args, "--omp-threads") == "4"
    assert flag(role.args, "--numa-binding") == "exclusive"
    no_omp = role_of(ddp(script="t.py", omp_threads=None))
    assert "--omp-threads" not in no_omp.args


@pytest.mark.parametrize(
    ("name", "experiment", "run"),
    [
        ("exp/run", "exp", "run"),
        ("exp/", "exp", "train"),
        ("/run", "default-experiment", "run"),
        ("run", "default-experiment", "run"),
        ("/", "default-experiment", "train"),
    ],
)
def test_name_forms_and_tracking_env(name: str, experiment: str, run: str) -> None:
    app = ddp(script="path/to/train.py", name=name)
    assert app.name == run
    env = role_of(app).env
    assert env["TORCHX_TRACKING_EXPERIMENT_NAME"] == experiment
    assert env["TORCHX_TRACKING_RUN_NAME"] == run


def test_env_debug_and_loglevel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGLEVEL", "INFO")
    env = role_of(ddp(script="t.py", env={"A": "1"}, debug=True)).env
    assert env["A"] == "1" and env["LOGLEVEL"] == "INFO"
    assert all(env[key] == value for key, value in TORCH_DEBUG_FLAGS.items())
    assert "CUDA_LAUNCH_BLOCKING" not in role_of(ddp(script="t.py")).env


def test_resources_from_h_take_precedence() -> None:
    role = role_of(ddp(script="t.py", h="aws_p5.48xlarge", cpu=1, gpu=1, memMB=10, j="1x8"))
    assert (role.resource.cpu, role.resource.gpu) == (192, 8)
    assert role.resource.capabilities["torchx_ext/numa_nodes"] == 2
    assert role.resource.capabilities["torchx_ext/gpus_per_numa_node"] == 4
    assert role.resource.capabilities["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    plain = role_of(ddp(script="t.py", cpu=3, gpu=0, memMB=2048)).resource
    assert (plain.cpu, plain.gpu, plain.memMB) == (3, 0, 2048)


def test_mounts_and_retries_and_image() -> None:
    role = role_of(
        ddp(script="t.py", mounts=["type=bind", "src=/data", "dst=/data", "readonly"], max_retries=3, image="my/img")
    )
    assert role.max_retries == 3 and role.image == "my/img"
    assert role.mounts == [specs.BindMount(src_path="/data", dst_path="/data", read_only=True)]


def test_spmd_bare_j_means_nodes_with_one_process_per_gpu() -> None:
    role = role_of(spmd(script="t.py", j="2", h="aws_p5.48xlarge"))
    assert flag(role.args, "--nnodes") == "2" and flag(role.args, "--nproc-per-node") == "8"
    elastic = role_of(spmd(script="t.py", j="2:5x8", h="dgx_h100"))
    assert flag(elastic.args, "--nnodes") == "2:5" and (elastic.min_replicas, elastic.num_replicas) == (2, 5)


@pytest.mark.parametrize("j", [" 2", "2 ", "2"])
def test_spmd_reads_a_bare_j_the_same_with_spaces(j: str) -> None:
    assert flag(role_of(spmd(script="t.py", j=j, h="dgx_h100")).args, "--nproc-per-node") == "8"


@pytest.mark.parametrize("j", ["1x", "x2", ":3", ":2x1", "1x2:3", "0x2", "3:2x1", "-1"])
def test_spmd_malformed_j(j: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid -j"):
        spmd(script="t.py", j=j, h="dgx_h100")


def test_spmd_bare_j_on_a_cpu_host_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match="has no GPU: give the processes per node as NODESxPROCS"):
        spmd(script="t.py", j="2", h="cpu_2socket")


def test_arguments_and_env_survive_torchx_macro_substitution() -> None:
    weird = ["$HOME", "$$", "${app_id}", "a b", "'q'", "line\nbreak"]
    app = ddp(*weird, script="t.py", j="2x1", env={"V": "$x ${app_id} $$"})
    role = role_of(app)
    values = macros.Values(
        img_root="", app_id="myapp-123", replica_id="0", rank0_env="TORCHX_RANK0_HOST"
    )
    applied = values.apply(role)
    assert applied.args[-len(weird):] == weird
    assert applied.env["V"] == "$x ${app_id} $$"
    assert flag(applied.args, "--rdzv-id") == "myapp-123"
    assert flag(applied.args, "--rdzv-endpoint-env") == "TORCHX_RANK0_HOST"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"script": "t.py", "h": "no_such_host"}, "unknown named resource -h 'no_such_host'"),
        ({"script": "t.py", "m": "mod"}, "exactly one of --script SCRIPT and -m MODULE (got both)"),
        ({}, "exactly one of --script SCRIPT and -m MODULE (got neither)"),
        ({"script": "t.py", "numa_binding": "numa"}, "unknown --numa-binding 'numa'"),
        ({"script": "t.py", "omp_threads": "lots"}, "invalid --omp-threads 'lots'"),
        ({"script": "t.py", "mounts": ["type=bind", "src=/a"]}, "malformed --mounts 'type=bind,src=/a'"),
        ({"script": "t.py", "mounts": ["nonsense"]}, "expected type=bind,src=HOST_PATH"),
        ({"script": "t.py", "h": "dgx_h100", "j": "1x9"}, "9 processes per node but the host has 8 GPUs"),
        ({"script": "t.py", "j": "1:2x1", "spares": 1}, "--spares 1 needs a fixed node count: -j 1:2x... is elastic"),
        ({"script": "t.py", "j": "2x1", "spares": -1}, "invalid --spares -1: expected 0 or more hot spares"),
        ({"script": "t.py", "j": "2x1", "spares": 1, "rdzv_backend": "static"}, "--spares 1 needs --rdzv_backend c10d"),
        ({"script": "t.py", "hang_timeout": "0"}, "invalid --hang_timeout '0': expected seconds from 1 to 604800"),
        ({"script": "t.py", "hang_timeout": "soon"}, "invalid --hang_timeout 'soon'"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as error:
        ddp(**kwargs)  # type: ignore[arg-type]
    assert message in str(error.value)


@pytest.mark.parametrize("component", [ddp, spmd])
def test_hang_timeout_reaches_the_launcher_only_when_given(component: object) -> None:
    timed = component(script="t.py", j="2x1", hang_timeout="30")  # type: ignore[operator]
    assert timed.roles[0].args[timed.roles[0].args.index("--hang-timeout") + 1] == "30"
    assert "--hang-timeout" not in component(script="t.py", j="2x1").roles[0].args  # type: ignore[operator]
    off = component(script="t.py", j="2x1", hang_timeout="off").roles[0].args  # type: ignore[operator]
    assert off[off.index("--hang-timeout") + 1] == "off"


def test_component_module_does_not_import_torch() -> None:
    code = "import sys, torchx_ext.components.dist, torchx_ext.resources, torchx_ext.cli.topo; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_without_torchx_the_components_say_what_to_install() -> None:
    import subprocess
    import sys

    code = "import sys; sys.modules['torchx'] = None; import torchx_ext.components.dist"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    assert result.returncode != 0
    assert "ImportError: torchx_ext.components needs torchx, which is not installed" in result.stderr
    assert "pip install 'torchx_ext[torchx]'" in result.stderr


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize("j, max_retries, restarts", [
    ("2x1", 0, None),  # a fixed job that may not lose a replica: survivors stop at once
    ("2x1", 1, "2"),  # each survivor restarts in place once per restart of either replica
    ("3x2", 2, "6"),
    ("1:2x1", 0, "1"),  # an elastic job carries on once without its lost replica
    ("2:4x1", 1, "6"),
    ("1x4", 3, None),  # one node: the scheduler restarts the replica and counts it
])
def test_max_retries_gives_survivors_restarts_in_place(j: str, max_retries: int, restarts: str | None) -> None:
    args = ddp(script="train.py", j=j, max_retries=max_retries).roles[0].args

    assert _flag(args, "--max-restarts") == restarts
    conf = _flag(args, "--rdzv-conf")
    assert (conf == "keep_alive_interval=2,keep_alive_max_attempt=3,last_call_timeout=5") == (restarts is not None)


def test_the_users_rdzv_conf_wins_over_the_liveness_defaults() -> None:
    args = ddp(script="train.py", j="2x1", max_retries=1, rdzv_conf="last_call_timeout=20,join_timeout=60").roles[0].args

    assert _flag(args, "--rdzv-conf") == "last_call_timeout=20,join_timeout=60,keep_alive_interval=2,keep_alive_max_attempt=3"


@pytest.mark.parametrize("j, spares, max_retries, nnodes, restarts", [
    ("2x4", 1, 0, "2", "1"),  # the survivors restart in place once, when the spare takes a lost replica's place
    ("2x4", 2, 1, "2", "6"),  # and once for each restart of any of the four replicas
    ("1x4", 1, 0, "1", "1"),  # one node and its spare: a rendezvous through rank 0's host, not a free local port
])
def test_spares_are_hot_spare_replicas_beyond_the_rendezvous_nodes(j: str, spares: int, max_retries: int, nnodes: str,
                                                                    restarts: str) -> None:
    role = ddp(script="train.py", j=j, spares=spares, max_retries=max_retries).roles[0]

    nodes = int(nnodes)
    assert (role.num_replicas, role.min_replicas) == (nodes + spares, nodes)
    # torchx-nightly has no HOT_SPARE: REPLICA there, the spares in the metadata on both lines.
    assert role.retry_policy == getattr(specs.RetryPolicy, "HOT_SPARE", specs.RetryPolicy.REPLICA)
    assert role.metadata[SPARES_KEY] == str(spares)
    assert _flag(role.args, "--nnodes") == nnodes
    assert _flag(role.args, "--node-rank") == specs.macros.replica_id
    assert _flag(role.args, "--rdzv-endpoint-env") == specs.macros.rank0_env
    assert _flag(role.args, "--max-restarts") == restarts
    assert _flag(role.args, "--hot-spares") == str(spares)


def test_spmd_takes_spares_too() -> None:
    role = spmd(script="train.py", j="2", h="dgx_h100", spares=1).roles[0]

    assert (role.num_replicas, role.min_replicas, role.metadata[SPARES_KEY]) == (3, 2, "1")
