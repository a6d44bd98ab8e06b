"""S3 on 127.0.0.1: moto's server with one bucket made, and the environment that points boto3 at it.

The S3 build cache (and anything else that reads ``AWS_ENDPOINT_URL_S3``) then talks to it with no
other change. moto is not a runtime dependency of rigbench: it comes with the ``rehearsal`` extra
(and the ``test`` one) and is imported only when a server starts.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boto3

from core.errors import StudyError

REGION = "us-east-1"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass(frozen=True)
class StandInS3:
    endpoint: str  # http://127.0.0.1:PORT
    bucket: str

    @property
    def env(self) -> dict[str, str]:
        """Variables that send boto3's S3 calls here with fake credentials. Unset ``AWS_SESSION_TOKEN``,
        ``AWS_PROFILE`` and ``AWS_ENDPOINT_URL`` beside them: any of those would win or mix in."""
        return {**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_S3": self.endpoint,
                "NO_PROXY": "127.0.0.1"}

    def client(self):
        """A boto3 S3 client for this server, whatever the environment says."""
        return boto3.client("s3", region_name=REGION, endpoint_url=self.endpoint,
                            aws_access_key_id="testing", aws_secret_access_key="testing")


@contextmanager
def moto_s3(bucket: str) -> Iterator[StandInS3]:
    """moto's S3 on a free 127.0.0.1 port with ``bucket`` made, until the block ends."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as error:
        raise StudyError(f"the S3 stand-in needs moto ({error}): pip install 'rigbench[rehearsal]'") from error
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise, on stderr
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        s3 = StandInS3(f"http://{host}:{port}", bucket)
        # moto keeps its state per process, not per server: start from nothing
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        direct.open(urllib.request.Request(f"{s3.endpoint}/moto-api/reset", method="POST"), timeout=10).close()
        s3.client().create_bucket(Bucket=bucket)
        yield s3
    finally:
        server.stop()
