"""The S3 wire layer of :class:`~tulip_nb.memory.backends._s3.S3Backend`: boto3 calls and their errors.

Every function here is synchronous and runs in the backend's worker pool. They translate botocore's
errors into the tulip_nb tree once, so the backend above speaks only in these terms:

- a missing object is ``None`` (never an exception);
- a failed ``If-Match`` / ``If-None-Match`` precondition is :class:`PreconditionFailed`;
- anything else that stops the I/O (endpoint down, timeout, missing bucket, access denied, 5xx
  after retries) is :class:`~tulip_nb.core.errors.BackendUnavailable` naming the backend, the
  endpoint and the key.

Why boto3 in threads rather than aiobotocore: a boto3 client is thread-safe and bound to no event
loop, so one backend serves the test loop, a notebook cell and ``run_sync``'s private loop alike
(an aiohttp session is tied to the loop that made it); and boto3 does not pin botocore to a narrow
range that every other AWS package in the environment must then match.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tulip_nb.core.errors import BackendUnavailable

__all__ = ["Listed", "PreconditionFailed", "S3IO", "Stored"]

_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}


class PreconditionFailed(Exception):
    """A conditional PUT lost (HTTP 412): the object changed since it was read."""


@dataclass(frozen=True)
class Stored:
    """One object read back: its bytes, ETag and user metadata."""

    body: bytes
    etag: str
    metadata: dict[str, str]


@dataclass(frozen=True)
class Listed:
    """One key from a listing."""

    key: str
    etag: str
    size: int
    modified: datetime | None = None


def _import_boto3() -> Any:
    try:
        import boto3
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("S3Backend needs boto3. Install it with: pip install 'tulip_nb[s3]'") from e
    return boto3


_SESSION: Any = None
_SESSION_LOCK = threading.Lock()


def _session(boto3: Any) -> Any:
    """One boto3 session per process: it caches the parsed service models, which makes a new
    client cost milliseconds instead of a few hundred (clients are made under the lock, as boto3
    sessions are not thread-safe)."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = boto3.session.Session()
        return _LockedSession(_SESSION)


class _LockedSession:
    def __init__(self, session: Any) -> None:
        self._session = session

    def client(self, *args: Any, **kwargs: Any) -> Any:
        with _SESSION_LOCK:
            return self._session.client(*args, **kwargs)


class S3IO:
    """A thin, error-translating wrapper over one boto3 S3 client (thread-safe)."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None,
        region_name: str | None,
        aws_access_key_id: str | None,
        aws_secret_access_key: str | None,
        max_pool_connections: int,
        connect_timeout: float,
        read_timeout: float,
        max_attempts: int,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        if client is None:
            boto3 = _import_boto3()
            from botocore.config import Config

            config = Config(
                max_pool_connections=max_pool_connections,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                retries={"max_attempts": max_attempts, "mode": "standard"},
                s3={"addressing_style": "path"} if endpoint_url else {},
            )
            client = _session(boto3).client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region_name,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                config=config,
            )
        self.client = client
        from botocore import exceptions

        self._exc = exceptions

    # -- errors -------------------------------------------------------------------------------
    def _where(self) -> str:
        return self.endpoint_url or f"AWS S3 ({self.region_name or 'default region'})"

    def unavailable(self, e: BaseException, key: str | None, action: str) -> BackendUnavailable:
        """The BackendUnavailable for a botocore error during ``action`` on ``key``."""
        if isinstance(e, self._exc.ClientError):
            err = e.response.get("Error", {})
            reason = f"{err.get('Code', '?')}: {err.get('Message', '')}".rstrip(": ")
        else:
            reason = f"{type(e).__name__}: {e}"
        path = f"s3://{self.bucket}/{key}" if key is not None else f"s3://{self.bucket}"
        return BackendUnavailable(f"S3Backend could not {action} at {self._where()}: {reason}", path=path)

    def _code(self, e: Any) -> tuple[str, int]:
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return str(err.get("Code", "")), int(status or 0)

    def _call(self, action: str, key: str | None, fn: Any, /, *, missing_ok: bool = True, **kwargs: Any) -> Any:
        """``fn(Bucket=..., **kwargs)``; a 404 is None (a missing object) unless ``missing_ok`` is
        False: a write answered 404 did not happen, and must not pass for a success."""
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except self._exc.ClientError as e:
            code, status = self._code(e)
            if status == 412 or code == "PreconditionFailed":
                raise PreconditionFailed(key) from e
            if missing_ok and (code in _MISSING_CODES or (status == 404 and code != "NoSuchBucket")):
                return None
            raise self.unavailable(e, key, action) from e
        except (self._exc.BotoCoreError, OSError) as e:
            raise self.unavailable(e, key, action) from e

    # -- objects ------------------------------------------------------------------------------
    def get(self, key: str, *, byte_range: str | None = None) -> Stored | None:
        extra: dict[str, Any] = {"Range": byte_range} if byte_range else {}
        resp = self._call("read an object", key, self.client.get_object, Key=key, **extra)
        if resp is None:
            return None
        try:
            body = resp["Body"].read()
        except (self._exc.BotoCoreError, OSError) as e:
            raise self.unavailable(e, key, "read an object") from e
        finally:
            resp["Body"].close()
        return Stored(body, resp.get("ETag", ""), dict(resp.get("Metadata") or {}))

    def head(self, key: str) -> bool:
        return self._call("check an object", key, self.client.head_object, Key=key) is not None

    def put(
        self,
        key: str,
        body: bytes,
        content_type: str,
        *,
        metadata: dict[str, str] | None = None,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """PUT one object; returns its ETag. Raises PreconditionFailed when a condition fails."""
        kwargs: dict[str, Any] = {"Key": key, "Body": body, "ContentType": content_type}
        if metadata:
            kwargs["Metadata"] = metadata
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        elif if_none_match:
            kwargs["IfNoneMatch"] = "*"
        try:
            resp = self._call("write an object", key, self.client.put_object, missing_ok=False, **kwargs)
        except BackendUnavailable as e:
            # If-Match on an object that is gone answers 404 NoSuchKey: the condition failed
            if if_match is not None and isinstance(e.__cause__, self._exc.ClientError):
                code, status = self._code(e.__cause__)
                if status == 404 and code != "NoSuchBucket":
                    raise PreconditionFailed(key) from e
            raise
        return str((resp or {}).get("ETag", ""))

    def delete_if(self, key: str, etag: str) -> None:
        """DELETE one object only while its ETag is ``etag``; PreconditionFailed when it changed or is gone."""
        try:
            self._call("delete an object", key, self.client.delete_object, missing_ok=False, Key=key, IfMatch=etag)
        except BackendUnavailable as e:
            if isinstance(e.__cause__, self._exc.ClientError):
                code, status = self._code(e.__cause__)
                if status == 404 and code != "NoSuchBucket":
                    raise PreconditionFailed(key) from e
            raise

    def delete_keys(self, keys: list[str]) -> None:
        """Delete up to any number of keys (batched by 1000, S3's limit)."""
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            resp = self._call(
                "delete objects",
                batch[0]["Key"],
                self.client.delete_objects,
                Delete={"Objects": batch, "Quiet": True},
            )
            errors = (resp or {}).get("Errors") or []
            if errors:
                first = errors[0]
                raise BackendUnavailable(
                    f"S3Backend could not delete {len(errors)} object(s): {first.get('Code')}: {first.get('Message')}",
                    path=f"s3://{self.bucket}/{first.get('Key')}",
                )

    def list_keys(self, prefix: str, *, delimiter: str | None = None) -> Iterator[Listed]:
        """Every key under ``prefix`` (directly under it when ``delimiter`` is ``"/"``)."""
        kwargs: dict[str, Any] = {"Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            resp = self._call("list objects", prefix, self.client.list_objects_v2, **kwargs)
            if resp is None:
                return
            for obj in resp.get("Contents") or []:
                yield Listed(obj["Key"], obj.get("ETag", ""), int(obj.get("Size", 0)), obj.get("LastModified"))
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return
            kwargs["ContinuationToken"] = token

    # -- bucket -------------------------------------------------------------------------------
    def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist (as tulip does by default)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return
        except self._exc.ClientError as e:
            code, status = self._code(e)
            if status != 404 and code not in ("404", "NoSuchBucket", "NotFound"):
                raise self.unavailable(e, None, "check the bucket") from e
        except (self._exc.BotoCoreError, OSError) as e:
            raise self.unavailable(e, None, "check the bucket") from e
        kwargs: dict[str, Any] = {}
        if self.region_name and self.region_name != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region_name}
        try:
            self.client.create_bucket(Bucket=self.bucket, **kwargs)
        except self._exc.ClientError as e:
            code, _ = self._code(e)
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self.unavailable(e, None, "create the bucket") from e
        except (self._exc.BotoCoreError, OSError) as e:
            raise self.unavailable(e, None, "create the bucket") from e

    def get_lifecycle_rules(self) -> list[dict[str, Any]]:
        try:
            resp = self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket)
        except self._exc.ClientError as e:
            code, _ = self._code(e)
            if code == "NoSuchLifecycleConfiguration":
                return []
            raise self.unavailable(e, None, "read the lifecycle configuration") from e
        except (self._exc.BotoCoreError, OSError) as e:
            raise self.unavailable(e, None, "read the lifecycle configuration") from e
        return list(resp.get("Rules") or [])

    def put_lifecycle_rules(self, rules: list[dict[str, Any]]) -> None:
        action = "write the lifecycle configuration"
        if rules:
            self._call(
                action, None, self.client.put_bucket_lifecycle_configuration, LifecycleConfiguration={"Rules": rules}
            )
        else:
            self._call(action, None, self.client.delete_bucket_lifecycle)

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()
