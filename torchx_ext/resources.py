"""Named resources (``-h``) for GPU hosts people rent or own, with their topology.

Each host is described by a MachineSpec (the same few numbers the test machines use), so
its cpu/gpu counts, its NUMA facts for schedulers (``capabilities``) and ``torchx topo
-h NAME``'s plan (on ``topology_of(spec)``) all come from one description. Registered
through the ``torchx.named_resources`` entry point group; torchx adds them to its own.
No torch import.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from torchx.specs import Resource

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.machine import AMD, NVIDIA, MachineSpec

K8S_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# Capability keys schedulers read (placement slices CPUs/NUMA nodes/GPUs among replicas).
NUMA_NODES = "torchx_ext/numa_nodes"
GPUS_PER_NUMA_NODE = "torchx_ext/gpus_per_numa_node"
SOCKETS = "torchx_ext/sockets"
CORES_PER_SOCKET = "torchx_ext/cores_per_socket"
THREADS_PER_CORE = "torchx_ext/threads_per_core"
MEMORY_ONLY_NUMA_NODES = "torchx_ext/memory_only_numa_nodes"
GPU_VENDOR = "torchx_ext/gpu_vendor"
GPU_TYPE = "torchx_ext/gpu_type"
"""The GPU model as clusters name it in a GRES type (``h100``): Slurm's ``--gpus-per-node=h100:8``."""

# As torchx's AWS resources: request 96% of a host's memory, so that pods fit in what a
# Kubernetes node leaves allocatable.
_MEMORY_SHARE = 0.96
EFA_DEVICE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class Host:
    name: str
    machine: MachineSpec
    mem_gib: int
    instance_type: str | None = None
    efa_devices: int = 0
    gpu_type: str = ""

    def resource(self) -> Resource:
        machine = self.machine
        cpu_nodes = machine.cpu_nodes
        capabilities: dict[str, object] = {
            NUMA_NODES: cpu_nodes,
            GPUS_PER_NUMA_NODE: len(machine.gpu_nodes) // cpu_nodes if machine.gpu_nodes else 0,
            SOCKETS: machine.sockets,
            CORES_PER_SOCKET: machine.nodes_per_socket * machine.cores_per_node,
            THREADS_PER_CORE: machine.threads_per_core,
            MEMORY_ONLY_NUMA_NODES: machine.memory_only_nodes,
            GPU_VENDOR: {NVIDIA: "nvidia", AMD: "amd"}[machine.gpu_vendor] if machine.gpu_nodes else "",
            GPU_TYPE: self.gpu_type,
        }
        if self.instance_type:
            capabilities[K8S_INSTANCE_TYPE] = self.instance_type
        return Resource(
            cpu=machine.total_cpus,
            gpu=len(machine.gpu_nodes),
            memMB=int(self.mem_gib * 1024 * _MEMORY_SHARE),
            capabilities=capabilities,
            devices={EFA_DEVICE: self.efa_devices} if self.efa_devices else {},
        )


def _two_socket(cores_per_socket: int, threads: int, gpus: int, memory_only_nodes: int = 0) -> MachineSpec:
    per_node = gpus // 2
    return MachineSpec(
        sockets=2,
        cores_per_node=cores_per_socket,
        threads_per_core=threads,
        gpu_nodes=tuple([0] * per_node + [1] * per_node),
        memory_only_nodes=memory_only_nodes,
    )


HOSTS: Mapping[str, Host] = {
    host.name: host
    for host in [
        # 2x Xeon 8275CL (24 cores, SMT), 8x A100 40GB, 4 per socket.
        Host("aws_p4d.24xlarge", _two_socket(24, 2, 8), 1152, "p4d.24xlarge", efa_devices=4, gpu_type="a100"),
        # 2x EPYC 7R13 (48 cores, SMT), 8x H100, 4 per socket.
        Host("aws_p5.48xlarge", _two_socket(48, 2, 8), 2048, "p5.48xlarge", efa_devices=32, gpu_type="h100"),
        # 2x Xeon 8481C (52 cores, SMT), 8x H100.
        Host("gcp_a3-highgpu-8g", _two_socket(52, 2, 8), 1872, "a3-highgpu-8g", gpu_type="h100"),
        # Standard_ND96isr_H100_v5: 96 vCPUs as 2x 48 cores without SMT, 8x H100.
        Host("azure_nd96isr_h100_v5", _two_socket(48, 1, 8), 1900, "Standard_ND96isr_H100_v5", gpu_type="h100"),
        # 2x Xeon 8480C (56 cores, SMT), 8x H100.
        Host("dgx_h100", _two_socket(56, 2, 8), 2048, gpu_type="h100"),
        # One GB200 NVL72 compute tray: 2 Grace (72 cores), 4 B200, GPU memory as CPU-less nodes.
        Host("gb200_nvl_tray", _two_socket(72, 1, 4, memory_only_nodes=4), 960, gpu_type="b200"),
        # A generic 2-socket CPU server, 32 cores each with SMT.
        Host("cpu_2socket", _two_socket(32, 2, 0), 512),
    ]
}

def host(name: str) -> Host:
    """Our host description for ``name``; the error lists every name we describe."""
    if name not in HOSTS:
        raise InvalidArgumentError(
            f"unknown named resource {name!r} for a topology: known are {', '.join(sorted(HOSTS))}"
        )
    return HOSTS[name]


# Entry points name module-level callables (setup.py, group torchx.named_resources).
def aws_p4d_24xlarge() -> Resource:
    return HOSTS["aws_p4d.24xlarge"].resource()


def aws_p5_48xlarge() -> Resource:
    return HOSTS["aws_p5.48xlarge"].resource()


def gcp_a3_highgpu_8g() -> Resource:
    return HOSTS["gcp_a3-highgpu-8g"].resource()


def azure_nd96isr_h100_v5() -> Resource:
    return HOSTS["azure_nd96isr_h100_v5"].resource()


def dgx_h100() -> Resource:
    return HOSTS["dgx_h100"].resource()


def gb200_nvl_tray() -> Resource:
    return HOSTS["gb200_nvl_tray"].resource()


def cpu_2socket() -> Resource:
    return HOSTS["cpu_2socket"].resource()
