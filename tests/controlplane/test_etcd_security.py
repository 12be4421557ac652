"""etcd over https with a CA and a client certificate, user/password auth, and failover
across every endpoint (issue 20, item 7), against real etcd processes.

devservices/etcd.py starts plain-http etcd only, so these tests run the same binary with the
TLS flags themselves.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup

from controlplane.errors import StoreUnavailable
from controlplane.state.etcd_client import EtcdAccess, EtcdClient, EtcdRequestFailed
from controlplane.state.etcd_store import EtcdStore
from core.paths import VAR_DIR
from core.processes import free_ports
from testing.tls import Issued, TestCA

BINARY = VAR_DIR / "etcd" / "bin" / "etcd"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not BINARY.exists(), reason="no etcd binary: run `make etcd`"),
]


@dataclass
class Etcd:
    endpoint: str
    process: subprocess.Popen
    log: Path


def start(tmp: Path, tls: tuple[TestCA, Issued] | None = None) -> Etcd:
    client, peer = free_ports(2)
    scheme = "https" if tls else "http"
    endpoint = f"{scheme}://127.0.0.1:{client}"
    argv = [
        str(BINARY), "--name=sec", f"--data-dir={tmp / 'data'}",
        f"--listen-client-urls={endpoint}", f"--advertise-client-urls={endpoint}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=sec=http://127.0.0.1:{peer}", "--initial-cluster-state=new",
        "--logger=zap", "--log-outputs=stderr",
    ]  # fmt: skip
    if tls:
        ca, server = tls
        argv += [
            f"--cert-file={server.chain_pem}", f"--key-file={server.key_pem}",
            "--client-cert-auth", f"--trusted-ca-file={ca.cert_pem}",
        ]  # fmt: skip
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "etcd.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    return Etcd(endpoint, process, log)


def wait_ready(access: EtcdAccess, etcd: Etcd) -> None:
    deadline = time.monotonic() + 30
    client = EtcdClient(access, timeout=2)
    while True:
        assert etcd.process.poll() is None, etcd.log.read_text()[-2000:]
        try:
            client.get(b"/ready")
            return
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
        finally:
            client.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA.create(tmp_path_factory.mktemp("etcd-pki"))


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory, pki: TestCA) -> Iterator[Etcd]:
    server = pki.issue("etcd", hosts=("127.0.0.1",))
    etcd = start(tmp_path_factory.mktemp("etcd-tls"), (pki, server))
    try:
        yield etcd
    finally:
        etcd.process.terminate()
        etcd.process.wait(timeout=30)


def group(job_group_id: str) -> StoredJobGroup:
    stored = StoredJobGroup()
    stored.job_group.job_group_id = job_group_id
    return stored


def test_https_with_a_ca_and_a_client_certificate(tls_etcd: Etcd, pki: TestCA) -> None:
    client = pki.issue("uatu-controlplane", client=True)
    access = EtcdAccess(
        (tls_etcd.endpoint,),
        ca_file=str(pki.cert_pem),
        cert_file=str(client.cert_pem),
        key_file=str(client.key_pem),
    )
    wait_ready(access, tls_etcd)
    store = EtcdStore(access, prefix="/tls")
    try:
        store.create(group("g"))
        assert store.get("g") is not None
    finally:
        store.close()
    # Without the client certificate, or trusting another CA, nothing gets through.
    for refused in (
        EtcdAccess((tls_etcd.endpoint,), ca_file=str(pki.cert_pem)),
        EtcdAccess((tls_etcd.endpoint,)),
    ):
        with pytest.raises(StoreUnavailable):
            EtcdStore(refused, prefix="/tls", timeout=2).get("g")


def test_failover_across_every_endpoint(tls_etcd: Etcd, pki: TestCA) -> None:
    client = pki.issue("uatu-failover", client=True)
    (dead,) = free_ports(1)
    access = EtcdAccess(
        (f"https://127.0.0.1:{dead}", tls_etcd.endpoint),  # the first member is down
        ca_file=str(pki.cert_pem),
        cert_file=str(client.cert_pem),
        key_file=str(client.key_pem),
    )
    store = EtcdStore(access, prefix="/failover")
    try:
        store.create(group("g"))
        assert [v.group.job_group.job_group_id for v in store.all()] == ["g"]
    finally:
        store.close()


def test_user_and_password(tmp_path: Path) -> None:
    etcd = start(tmp_path / "auth")
    try:
        wait_ready(EtcdAccess((etcd.endpoint,)), etcd)
        admin = EtcdClient(etcd.endpoint)
        admin.call("auth/user/add", {"name": "root", "password": "root-pw"})
        admin.call("auth/user/grant", {"user": "root", "role": "root"})
        admin.call("auth/user/add", {"name": "uatu", "password": "uatu-pw"})
        admin.call("auth/role/add", {"name": "uatu"})
        admin.call(
            "auth/role/grant",
            {"name": "uatu", "perm": {"permType": "READWRITE", "key": "L3NlYw==",
                                       "range_end": "L3NlZA=="}},  # [/sec, /sed)
        )  # fmt: skip
        admin.call("auth/user/grant", {"user": "uatu", "role": "uatu"})
        admin.call("auth/enable", {})
        with pytest.raises(EtcdRequestFailed):
            EtcdStore(etcd.endpoint, prefix="/sec").get("g")  # no credentials
        store = EtcdStore(
            EtcdAccess((etcd.endpoint,), user="uatu", password="uatu-pw"), prefix="/sec"
        )
        store.create(group("g"))
        assert store.get("g") is not None
        with pytest.raises(EtcdRequestFailed):  # the role covers /sec only
            EtcdStore(
                EtcdAccess((etcd.endpoint,), user="uatu", password="uatu-pw"), prefix="/other"
            ).get("g")
    finally:
        etcd.process.terminate()
        etcd.process.wait(timeout=30)
