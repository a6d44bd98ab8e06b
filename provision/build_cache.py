"""A shared cache of llama.cpp builds in S3, keyed by the build script's cache key.

A build takes about ten minutes of paid GPU time; its binaries are static, so a rig of the same
GPU architecture can reuse another rig's build. This module runs on the controller (your
machine), which holds the AWS credentials: it looks an archive up with ``head_object`` and hands
the rig presigned URLs, so the rig needs no credentials and no IAM role, only ``curl``.

An object is ``<prefix><key>.tar.gz`` (the archive of ``build_script.py --pack``) with the
archive's sha256 in its user metadata ``sha256``; the rig checks the download against it before
it unpacks anything. The presigned PUT signs ``x-amz-meta-sha256``, so an upload must carry the
digest it was signed for.
"""

from __future__ import annotations

from typing import Any

from core.errors import ProvisionError

DEFAULT_PREFIX = "llama.cpp/builds/"
URL_SECONDS = 3600  # long enough for a slow download, short enough not to matter if a log keeps one
SHA256_METADATA = "sha256"
MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
MISSING_BUCKET_CODES = {"NoSuchBucket"}
DENIED_CODES = {"403", "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                "ExpiredToken", "InvalidToken"}


def default_client() -> Any:
    """``boto3.client("s3")`` with SigV4 presigning; the endpoint (AWS_ENDPOINT_URL_S3,
    AWS_ENDPOINT_URL), region and credentials come from the usual environment and config."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(signature_version="s3v4"))


class S3BuildCache:
    """Built llama.cpp archives in ``bucket`` under ``prefix``, one object per build key."""

    def __init__(self, bucket: str, client: Any = None, prefix: str = DEFAULT_PREFIX) -> None:
        self.bucket = bucket
        self.client = client if client is not None else default_client()
        self.prefix = prefix

    def object_key(self, key: str) -> str:
        return f"{self.prefix}{key}.tar.gz"

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.object_key(key)}"

    def lookup(self, key: str) -> tuple[str, str] | None:
        """(uri, sha256) of the build stored for ``key``, or None. An object without the sha256
        metadata cannot be checked on the rig, so it counts as absent (with a warning line)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.object_key(key))
        except ClientError as error:
            code = error_code(error)
            if code in MISSING_CODES:
                self.check_bucket()  # HEAD answers 404 for a missing bucket too
                return None
            raise self.failure(f"HeadObject {self.object_key(key)}", error) from None
        except BotoCoreError as error:  # no credentials, no region, no endpoint
            raise self.unreachable(error) from None
        sha256 = (head.get("Metadata") or {}).get(SHA256_METADATA, "").strip().lower()
        if len(sha256) != 64:
            print(f"[build] warning: {self.uri(key)} has no {SHA256_METADATA} metadata to check it by; "
                  "treating it as absent (it will be overwritten)", flush=True)
            return None
        return self.uri(key), sha256

    def check_bucket(self) -> None:
        """A ProvisionError naming the bucket when it is missing or this account may not use it."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as error:
            raise self.failure("HeadBucket", error) from None
        except BotoCoreError as error:
            raise self.unreachable(error) from None

    def download_url(self, key: str) -> str:
        """A presigned GET of the key's archive (valid for an hour)."""
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self.object_key(key)}, ExpiresIn=URL_SECONDS
        )

    def upload_url(self, key: str, sha256: str) -> str:
        """A presigned PUT of the key's archive; ``x-amz-meta-sha256: <sha256>`` is among its signed
        headers, so the upload must send exactly that header."""
        return self.client.generate_presigned_url(
            "put_object",
            Params={"Bucket": self.bucket, "Key": self.object_key(key), "Metadata": {SHA256_METADATA: sha256}},
            ExpiresIn=URL_SECONDS,
        )

    def failure(self, operation: str, error: Exception) -> ProvisionError:
        code = error_code(error)
        where = f"S3 bucket {self.bucket}"
        if code in MISSING_BUCKET_CODES or (operation == "HeadBucket" and code in MISSING_CODES):
            return ProvisionError(
                f"build cache: {where} does not exist (or is in another account); create it "
                "(pulumi config set buildCacheBucketCreate true on one stack) or name another with --cache-bucket"
            )
        if code in DENIED_CODES:
            return ProvisionError(
                f"build cache: {where}: access denied ({code} on {operation}); your AWS credentials need "
                f"s3:ListBucket on it and s3:GetObject, s3:PutObject on {self.prefix}*"
            )
        return ProvisionError(f"build cache: {where}: {operation} failed ({code}: {error})")

    def unreachable(self, error: Exception) -> ProvisionError:
        return ProvisionError(f"build cache: cannot reach S3 bucket {self.bucket} ({type(error).__name__}: {error}); "
                              "check your AWS credentials, region and AWS_ENDPOINT_URL_S3")


def error_code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))
