"""The Spark connector against a server with tokens and TLS (certificates made at test
time): push_dataframe, format("beava") write and read over tcps:// and https://."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install ./spark_connector)")
trustme = pytest.importorskip("trustme")

import beava as bv  # noqa: E402
import beava_spark  # noqa: E402
from beava_spark import push_dataframe  # noqa: E402
from beava_spark.errors import ServerCheckError  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402

ADMIN = "spark-admin-token-000001"
WRITE = "spark-write-token-000002"
READ = "spark-read-token-0000003"


@bv.event
class Click:
    user: str
    cost: float


@bv.table(key="user")
def Spend(c: Click) -> bv.Table:
    return c.group_by("user").agg(n=bv.count(), total=bv.sum("cost"))


def test_push_write_and_read_with_token_and_tls(spark: Any, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    ca_file = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    proc = BeavaProcess("--tls-cert", str(tmp_path / "cert.pem"),
                        "--tls-key", str(tmp_path / "key.pem"),
                        env={"BEAVA_AUTH_TOKENS": f"{ADMIN}:admin;{WRITE}:write;{READ}:read"})
    try:
        tcps, https = f"tcps://{proc.addrs['tcp']}", f"https://{proc.addrs['http']}"
        with bv.App(tcps, token=ADMIN, ca=ca_file) as app:
            app.register(Click, Spend)
        beava_spark.register(spark)
        df = spark.createDataFrame([(f"u{i % 50}", 1.0) for i in range(1000)],
                                   "user string, cost double")
        totals = push_dataframe(df, "Click", tcps, token=WRITE, ca=ca_file, batch_size=100)
        assert totals.acknowledged == 1000
        df.write.format("beava").option("url", tcps).option("event", "Click") \
            .option("token", WRITE).option("ca", ca_file).mode("append").save()
        with pytest.raises(ServerCheckError, match="forbidden"):  # before any task runs
            push_dataframe(df, "Click", tcps, token=READ, ca=ca_file)
        with pytest.raises(ServerCheckError, match="CERTIFICATE_VERIFY_FAILED|certificate"):
            push_dataframe(df, "Click", tcps, token=WRITE)
        for url in (tcps, https):
            rows = spark.read.format("beava").option("url", url).option("table", "Spend") \
                .option("token", READ).option("ca", ca_file).load().collect()
            assert sorted((r.user, r.n, r.total) for r in rows) == sorted(
                (f"u{i}", 40, 40.0) for i in range(50))
    finally:
        proc.terminate()
