"""Who may call the control plane: bearer tokens and mTLS identities, and the server
interceptor that checks them on every call before a servicer runs.

Principals come from the auth file (`serve --auth-token-file FILE`), one per line::

    # role   name        credential
    admin    ops         token:<a random token of at least 32 characters>
    read     dashboards  token-sha256:<hex SHA-256 of the token, so the file holds no token>
    admin    deployer    cert:<CN or SAN of a client certificate signed by --tls-client-ca>

`serve --admin-token-file FILE` admits one more principal, `admin admin-token-file`, whose
token is FILE's whole content (the file a client's `--token-file` reads). A missing FILE is
created with a random token, mode 0600 (`ensure_token_file`): what `make controlplane` uses,
so the documented default is never unauthenticated.

A caller sends its token as ``authorization: Bearer <token>`` metadata, or presents a client
certificate (mTLS, `--tls-client-ca`). With `--tls-client-ca` and no auth file, every client
certificate the CA signed is an admin: the CA is the access list.

Roles per call (`required_role`), deny by default:

* MasterAdminService reads (GetJobGroup, GetAllJobGroups, GetClusterScaleStatus) and server
  reflection need `read`; every other admin call (AddJobGroup, UpdateJobGroup,
  UpdateJobGroupState, DeleteJobGroup) and any method this table does not know needs `admin`;
* the health service is open (load balancers probe it);
* MasterWorkerService is open here: a worker proves itself with its per-launch secret, which
  `workers.py` checks (it is not an operator).

No credential, or an unknown one: UNAUTHENTICATED. A `read` principal on a write:
PERMISSION_DENIED. Both through `controlplane.errors` like every other error.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import grpc

from controlplane.errors import PermissionDenied, Unauthenticated, grpc_status
from core.errors import ConfigError
from core.secret_files import read_secret_file

log = logging.getLogger("uatu.auth")

ADMIN_SERVICE = "uber.data.kafka.datatransfer.MasterAdminService"
WORKER_SERVICE = "uber.data.kafka.datatransfer.MasterWorkerService"
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICES = (
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)
READ_METHODS = frozenset({"GetJobGroup", "GetAllJobGroups", "GetClusterScaleStatus"})
MIN_TOKEN_CHARS = 32
WORKER_SECRET_HEADER = "uatu-worker-secret"


class Role(enum.Enum):
    READ = "read"
    ADMIN = "admin"

    def allows(self, required: Role) -> bool:
        return self is Role.ADMIN or required is Role.READ


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role


ADMIN_TOKEN_PRINCIPAL = Principal("admin-token-file", Role.ADMIN)


def required_role(method: str) -> Role | None:
    """The role a full method name (``/package.Service/Method``) needs; None: open."""
    service, _, name = method.lstrip("/").rpartition("/")
    if service in (HEALTH_SERVICE, WORKER_SERVICE):
        return None
    if service in REFLECTION_SERVICES:
        return Role.READ
    if service == ADMIN_SERVICE and name in READ_METHODS:
        return Role.READ
    return Role.ADMIN


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class AuthPolicy:
    """Tokens (by SHA-256) and certificate names, each mapped to its principal."""

    tokens: Mapping[bytes, Principal] = field(default_factory=lambda: MappingProxyType({}))
    certificates: Mapping[str, Principal] = field(default_factory=lambda: MappingProxyType({}))
    # mTLS without an auth file: any certificate the client CA signed is this principal.
    any_certificate: Principal | None = None

    def authenticate(self, token: str | None, cert_names: Sequence[str]) -> Principal | None:
        if token:
            digest = token_digest(token)
            found = None
            for known, principal in self.tokens.items():  # compare every entry: no early exit
                if hmac.compare_digest(known, digest):
                    found = principal
            if found is not None:
                return found
        for name in cert_names:
            if name in self.certificates:
                return self.certificates[name]
        if cert_names and self.any_certificate is not None:
            return self.any_certificate
        return None


def parse_auth_file(text: str, source: str) -> AuthPolicy:
    """The auth file's principals (see the module docstring); ConfigError names the line."""
    tokens: dict[bytes, Principal] = {}
    certificates: dict[str, Principal] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{number}"
        parts = line.split()
        if len(parts) != 3:
            raise ConfigError(where, "expected 'ROLE NAME CREDENTIAL'")
        role_name, name, credential = parts
        try:
            role = Role(role_name)
        except ValueError:
            raise ConfigError(where, f"role {role_name!r} is not 'admin' or 'read'") from None
        kind, _, value = credential.partition(":")
        principal = Principal(name, role)
        if kind == "token":
            if len(value) < MIN_TOKEN_CHARS:
                raise ConfigError(where, f"token of {name!r} is shorter than {MIN_TOKEN_CHARS}")
            tokens[token_digest(value)] = principal
        elif kind == "token-sha256":
            try:
                digest = bytes.fromhex(value)
            except ValueError:
                digest = b""
            if len(digest) != 32:
                raise ConfigError(where, f"token-sha256 of {name!r} is not 64 hex digits")
            tokens[digest] = principal
        elif kind == "cert":
            if not value:
                raise ConfigError(where, f"cert: of {name!r} names no certificate")
            certificates[value] = principal
        else:
            raise ConfigError(where, "credential must start with token:, token-sha256: or cert:")
    if not tokens and not certificates:
        raise ConfigError(source, "no principals: an auth file that admits nobody is a mistake")
    return AuthPolicy(MappingProxyType(tokens), MappingProxyType(certificates))


def load_auth_file(path: Path) -> AuthPolicy:
    return parse_auth_file(read_secret_file(path, "--auth-token-file"), str(path))


def ensure_token_file(path: Path, option: str = "--admin-token-file") -> tuple[str, bool]:
    """The token in `path`, and whether it was created now: a missing file is created with a
    random token (URL-safe, 43 characters), mode 0600, in a folder made 0700 if missing.
    ConfigError naming `option` when the file cannot be made or holds too short a token."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fd = None
    except OSError as e:
        raise ConfigError(option, f"{path}: {e.strerror or e}") from None
    if fd is None:
        token = read_secret_file(path, option).strip()
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(option, f"{path}: holds no token of {MIN_TOKEN_CHARS}+ characters")
        return token, False
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token, True


def admit_token(policy: AuthPolicy | None, token: str, principal: Principal) -> AuthPolicy:
    """`policy` (None: nobody) that also admits `token` as `principal` (pure)."""
    base = policy or AuthPolicy()
    tokens = {**base.tokens, token_digest(token): principal}
    return AuthPolicy(MappingProxyType(tokens), base.certificates, base.any_certificate)


def bearer_token(metadata: Iterable[Any] | None) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def certificate_names(context: grpc.ServicerContext) -> list[str]:
    """The verified client certificate's CN and SANs ([] without a client certificate)."""
    auth = context.auth_context() or {}
    names = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        names += [v.decode() if isinstance(v, bytes) else str(v) for v in auth.get(key, ())]
    return names


class AuthInterceptor(grpc.ServerInterceptor):
    """Checks the caller of every call against `policy` before the handler runs."""

    def __init__(self, policy: AuthPolicy) -> None:
        self._policy = policy

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        required = required_role(method)
        if handler is None or required is None:
            return handler
        token = bearer_token(handler_call_details.invocation_metadata)

        def check(context: grpc.ServicerContext) -> None:
            try:
                principal = self._policy.authenticate(token, certificate_names(context))
                if principal is None:
                    raise Unauthenticated(method)
                if not principal.role.allows(required):
                    raise PermissionDenied(principal.name, principal.role.value, method)
            except (Unauthenticated, PermissionDenied) as e:
                log.warning("refused %s from %s: %s", method, context.peer(), e)
                context.abort(grpc_status(e), str(e))

        return _guarded(handler, check)


def _guarded(handler: Any, check: Callable[[grpc.ServicerContext], None]) -> Any:
    """`handler` with `check(context)` run first, for each of the four call shapes."""
    kinds = (
        ("unary_unary", grpc.unary_unary_rpc_method_handler),
        ("unary_stream", grpc.unary_stream_rpc_method_handler),
        ("stream_unary", grpc.stream_unary_rpc_method_handler),
        ("stream_stream", grpc.stream_stream_rpc_method_handler),
    )
    for attribute, make in kinds:
        behavior = getattr(handler, attribute)
        if behavior is not None:

            def guarded(request: Any, context: grpc.ServicerContext, behavior=behavior) -> Any:
                check(context)
                return behavior(request, context)

            return make(
                guarded,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return handler
