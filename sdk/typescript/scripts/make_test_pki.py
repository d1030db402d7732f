"""Certificates for the TypeScript SDK's TLS tests (test/transport.test.ts), made with trustme
(a test dependency of the Python package) as the Python TLS tests make theirs: a private CA
and a server certificate for 127.0.0.1 and localhost that it signed.

Run: `python sdk/typescript/scripts/make_test_pki.py DIR` writes DIR/ca.pem, DIR/cert.pem
(the server's certificate chain) and DIR/key.pem (its private key).
"""

from __future__ import annotations

import sys
from pathlib import Path

import trustme


def main(out: Path) -> None:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(out / "ca.pem"))
    for i, pem in enumerate(server.cert_chain_pems):
        pem.write_to_path(str(out / "cert.pem"), append=i > 0)
    server.private_key_pem.write_to_path(str(out / "key.pem"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
