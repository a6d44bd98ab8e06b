"""One EC2 call with botocore's failures turned into one InfraError that names the call and what to do.

The orphan sweep and the zone ranking both call EC2 with the user's own credentials; a missing
credential, a refused permission or a network failure reads the same way from both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.errors import InfraError

PERMISSION_CODES = ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException")


def ec2_call(region: str, action: str, call: Callable[[], Any], permission: str, advice: str = "") -> Any:
    """Run ``call`` (an EC2 request named ``action``, which needs ``permission``)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return call()
    except NoCredentialsError:
        raise InfraError(
            f"{action} in {region}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY (or run `aws configure`)"
        ) from None
    except ClientError as error:
        info = error.response.get("Error", {})
        code, message = info.get("Code", "error"), info.get("Message", str(error))
        if code in PERMISSION_CODES:
            raise InfraError(
                f"{action} in {region} refused ({code}): the credentials lack the IAM permission {permission}; "
                f"grant it to the IAM user or role of these credentials (`aws sts get-caller-identity`){advice}"
            ) from None
        raise InfraError(f"{action} in {region} refused: {code}: {message}; check the region and that your "
                         f"credentials allow {permission}") from None
    except BotoCoreError as error:
        raise InfraError(f"{action} in {region} failed: {error}; check the network and the region name") from None
