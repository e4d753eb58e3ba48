"""SASL mechanisms as state machines over bytes (no sockets): what a Kafka connection sends and
checks while it authenticates, on the client side and on the server side.

Client side (`client_for(security)` picks one from a `ClientSecurity`):

- `PlainClient`: PLAIN (RFC 4616), one message ``authzid NUL authcid NUL passwd``.
- `ScramClient`: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: no
  channel binding (gs2 header ``n,,``), user names escaped (``=2C``, ``=3D``), Kafka's
  ``tokenauth=true`` extension for delegation tokens, iteration counts from 4096 (Kafka's
  minimum) to `SCRAM_CLIENT_MAX_ITERATIONS`.
- `OAuthBearerClient`: OAUTHBEARER (RFC 7628): ``n,,\\x01auth=Bearer <token>\\x01\\x01`` (with
  Kafka's SASL extensions), and Kafka's failure exchange: the server answers an error document
  (``{"status":"invalid_token"}``), the client sends ``\\x01``, the server fails the exchange.

Server side (`server_for(mechanism, store)`, checking against a `CredentialStore` such as
`kafkacodec.net.users.UsersFile`): `PlainServer` and `ScramServer`.  Every comparison of a
secret is constant-time (`hmac.compare_digest`); the server nonce comes from `secrets`; an
unknown user gets the same answers, the same work and the same failure as a wrong password (a
SCRAM server answers it with a salt derived from the name, RFC 5802 section 5.1's advice;
Kafka's own server fails at once, which tells who exists).  The authenticated principal is
``User:<name>``, as Kafka's DefaultKafkaPrincipalBuilder makes it.

The protocol shape of each mechanism object:

    client: start() -> first message; evaluate_challenge(token) -> reply or None; complete
    server: evaluate_response(token) -> challenge to send back; complete, principal

A failed check raises `kafkacodec.errors.AuthenticationError` (Kafka's
SASL_AUTHENTICATION_FAILED) and leaves the object failed; a call in the wrong state raises
`MisuseError`.

And the two pieces Kafka's wire protocol adds around them:

- `sasl_flow(handshake_version)`: SaslHandshake v0 is followed by raw SASL tokens, each a
  4-byte big-endian size and the bytes with no Kafka request header (what 0.10 clients send),
  v1 by SaslAuthenticate requests (KIP-152) -- `SaslFlow`.
- KIP-368 re-authentication: `session_lifetime_ms()` (the server's session_lifetime_ms in the
  SaslAuthenticate response), `reauthentication_delay_ms()` (when a client re-authenticates: a
  random point between 85 % and 95 % of the lifetime, as Kafka's clients), and
  `check_reauthentication()` (the mechanism and the principal may not change).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
import logging
import random
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Union

from kafkacodec.errors import AuthenticationError, MisuseError, UnsupportedVersionError
from kafkacodec.net._secret import Secret

if TYPE_CHECKING:
    from kafkacodec.net.properties import ClientSecurity

__all__ = [
    "SCRAM_MECHANISMS", "SERVER_MECHANISMS", "CLIENT_MECHANISMS", "SCRAM_MIN_ITERATIONS",
    "SCRAM_MAX_ITERATIONS", "SCRAM_CLIENT_MAX_ITERATIONS", "ScramCredential", "PlainCredential",
    "OAuthBearerToken", "TokenCallback", "unsecured_jwt", "SaslClient", "SaslServer",
    "PlainClient", "ScramClient", "OAuthBearerClient", "PlainServer", "ScramServer",
    "CredentialStore", "client_for", "server_for", "SaslFlow", "sasl_flow",
    "reauthentication_supported", "session_lifetime_ms", "reauthentication_delay_ms",
    "check_reauthentication",
]

log = logging.getLogger(__name__)

# Kafka's ScramMechanism: the hash of each mechanism, and the bounds its brokers store.
SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384
# A client computes Hi() with the count the server names: a hostile server could ask for
# billions.  Above this (~0.1 s of SHA-512 on one core) the client refuses.
SCRAM_CLIENT_MAX_ITERATIONS = 100_000
SERVER_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# PLAIN credentials: PBKDF2-HMAC-SHA-512 (users.py says why).
PLAIN_ALGORITHM = "PBKDF2-HMAC-SHA512"

PasswordLike = Union[Secret, str]


def _password_bytes(password: PasswordLike) -> bytes:
    # Kafka's ScramFormatter.normalize: the UTF-8 bytes, no SASLprep
    text = password.reveal() if isinstance(password, Secret) else password
    return text.encode("utf-8")


# --- credentials -------------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class ScramCredential:
    """What a server keeps of a SCRAM password, as Kafka's ScramCredential: the salt, the
    iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
    HMAC(SaltedPassword, "Server Key") (RFC 5802 section 3).  The password cannot be had back
    from them, but a leaked StoredKey lets an attacker guess passwords offline: keep it private."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(cls, mechanism: str, password: PasswordLike, *,
                      iterations: int = SCRAM_MIN_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
        digest = _scram_digest(mechanism)
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise ValueError(f"{mechanism} iterations must be {SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS} "
                             f"(Kafka's bounds), got {iterations}")
        salt = secrets.token_bytes(32) if salt is None else salt
        salted = hashlib.pbkdf2_hmac(digest, _password_bytes(password), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", digest)
        return cls(mechanism, salt, iterations, hashlib.new(digest, client_key).digest(),
                   hmac.digest(salted, b"Server Key", digest))

    def __repr__(self) -> str:
        return f"ScramCredential({self.mechanism}, iterations={self.iterations})"


@dataclass(frozen=True, repr=False)
class PlainCredential:
    """What a server keeps of a PLAIN password: PBKDF2-HMAC-SHA-512 of it with a random salt.
    `verify()` hashes a presented password the same way and compares in constant time."""

    salt: bytes
    iterations: int
    hash: bytes
    algorithm: str = PLAIN_ALGORITHM

    @classmethod
    def from_password(cls, password: PasswordLike, *, iterations: int = SCRAM_MIN_ITERATIONS,
                      salt: bytes | None = None) -> PlainCredential:
        if not SCRAM_MIN_ITERATIONS <= iterations <= 1_000_000:
            raise ValueError(f"PLAIN iterations must be {SCRAM_MIN_ITERATIONS}..1000000, got {iterations}")
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls(salt, iterations, hashlib.pbkdf2_hmac("sha512", _password_bytes(password), salt, iterations))

    def verify(self, password: PasswordLike) -> bool:
        computed = hashlib.pbkdf2_hmac("sha512", _password_bytes(password), self.salt, self.iterations)
        return hmac.compare_digest(computed, self.hash)

    def __repr__(self) -> str:
        return f"PlainCredential({self.algorithm}, iterations={self.iterations})"


def _scram_digest(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"{mechanism!r} is not a SCRAM mechanism ({', '.join(SCRAM_MECHANISMS)})") from None


# --- OAUTHBEARER tokens ------------------------------------------------------------------------

@dataclass(frozen=True)
class OAuthBearerToken:
    """A bearer token for OAUTHBEARER: the value (kept as a `Secret`), when it expires (ms since
    the epoch, Java's OAuthBearerToken.lifetimeMs(); None if unknown), its principal if known,
    and the SASL extensions to send with it."""

    value: Secret
    lifetime_ms: int | None = None
    principal: str | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)


#: A token source given in code: called at each authentication (and re-authentication).
TokenCallback = Callable[[], Union[OAuthBearerToken, str]]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unsecured_jwt(claims: Mapping[str, object]) -> str:
    """An unsecured JWS (RFC 7515 with ``{"alg":"none"}`` and an empty signature), what Kafka's
    OAuthBearerUnsecuredLoginCallbackHandler and librdkafka's unsecured token handler send: only
    for brokers set up to accept unsecured tokens (tests, development)."""
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(dict(claims), separators=(",", ":")).encode())
    return f"{header}.{payload}."


# RFC 6750 section 2.1's b64token; Kafka's server accepts its subset [-_.a-zA-Z0-9]+.
_B64TOKEN = re.compile(r"[-a-zA-Z0-9._~+/]+=*")
# RFC 7628 section 3.1 (and Kafka's OAuthBearerClientInitialResponse): extension keys and values.
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")


def _check_extensions(extensions: Mapping[str, str]) -> None:
    for key, value in extensions.items():
        if key == "auth" or not _EXTENSION_KEY.fullmatch(key):
            raise ValueError(f"OAUTHBEARER extension name {key!r} is invalid (letters only, not 'auth')")
        if not _EXTENSION_VALUE.fullmatch(value):
            raise ValueError(f"OAUTHBEARER extension {key!r}: its value has characters RFC 7628 does not allow")


# --- the mechanism interfaces ------------------------------------------------------------------

class SaslClient(Protocol):
    """The client side of one SASL exchange."""

    mechanism: str

    def start(self) -> bytes:
        """The client's first message (every mechanism here sends one)."""
        ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The reply to the server's token, or None when there is nothing to send (done)."""
        ...

    @property
    def complete(self) -> bool:
        """The exchange finished on this side (the server's verdict may still be to come)."""
        ...


class SaslServer(Protocol):
    """The server side of one SASL exchange."""

    mechanism: str

    def evaluate_response(self, response: bytes) -> bytes:
        """The challenge to send back (empty bytes when there is nothing to say)."""
        ...

    @property
    def complete(self) -> bool:
        """The client is authenticated (`principal` is set)."""
        ...

    @property
    def principal(self) -> str:
        """``User:<name>``, once complete."""
        ...


class CredentialStore(Protocol):
    """Where a server finds what it checks passwords against (users.UsersFile is one)."""

    def scram_credential(self, name: str, mechanism: str) -> ScramCredential | None: ...

    def plain_credential(self, name: str) -> PlainCredential | None: ...


class _Machine:
    """The states every mechanism shares: failed is final, and a call after it is misuse."""

    mechanism: str
    _failed = False
    _complete = False

    def _check_usable(self) -> None:
        if self._failed:
            raise MisuseError(f"SASL/{self.mechanism}: this exchange already failed; start a new one")
        if self._complete:
            raise MisuseError(f"SASL/{self.mechanism}: this exchange is complete; start a new one "
                              "to re-authenticate")

    def _fail(self, reason: str) -> AuthenticationError:
        self._failed = True
        return AuthenticationError(f"SASL/{self.mechanism} authentication failed: {reason}")

    @property
    def complete(self) -> bool:
        return self._complete


def _server_text(data: bytes, limit: int = 200) -> str:
    """A peer's text for a message: decoded, control characters replaced, bounded."""
    text = data.decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


# --- PLAIN -------------------------------------------------------------------------------------

class PlainClient(_Machine):
    """PLAIN (RFC 4616): the whole exchange is the first message; Kafka's server answers with
    an empty token, or fails the exchange."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: PasswordLike) -> None:
        if not username or "\0" in username:
            raise ValueError("PLAIN needs a user name without NUL characters")
        self._username = username
        self._password = password if isinstance(password, Secret) else Secret(password)
        self._started = False

    def start(self) -> bytes:
        if self._started:
            raise MisuseError("SASL/PLAIN: start() was already called")
        self._started = True
        self._complete = True
        password = _password_bytes(self._password)
        if not password or b"\0" in password:
            raise self._fail("the password is empty or holds a NUL character")
        return b"\0" + self._username.encode("utf-8") + b"\0" + password

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if not self._started or self._failed:
            raise MisuseError("SASL/PLAIN: evaluate_challenge() before start() or after a failure")
        if challenge:
            raise self._fail("the server sent a challenge; PLAIN has none")
        return None

    def __repr__(self) -> str:
        return f"PlainClient(username={self._username!r})"


_UNKNOWN_PLAIN: list[PlainCredential] = []


def _unknown_plain_user() -> PlainCredential:
    """Checked against when the user is unknown, so both cases cost one hash (made once, at the
    first use, not at import)."""
    if not _UNKNOWN_PLAIN:
        _UNKNOWN_PLAIN.append(PlainCredential.from_password(secrets.token_urlsafe(16)))
    return _UNKNOWN_PLAIN[0]


class PlainServer(_Machine):
    """PLAIN's server side (Kafka's PlainSaslServer checks, against hashed credentials)."""

    mechanism = "PLAIN"

    def __init__(self, store: CredentialStore) -> None:
        self._store = store
        self._principal: str | None = None

    def evaluate_response(self, response: bytes) -> bytes:
        self._check_usable()
        parts = bytes(response).split(b"\0")
        if len(parts) != 3:
            raise self._fail(f"expected 3 NUL-separated fields (RFC 4616), got {len(parts)}")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise self._fail("the message is not UTF-8") from None
        if not username:
            raise self._fail("no user name")
        if not password:
            raise self._fail("no password")
        if authzid and authzid != username:
            raise self._fail("the client asked for an authorization id other than its user name")
        credential = self._store.plain_credential(username)
        ok = (credential or _unknown_plain_user()).verify(password)
        if credential is None or not ok:
            log.info("SASL/PLAIN: authentication of %r failed", username)
            raise self._fail("invalid user name or password")
        self._principal = f"User:{username}"
        self._complete = True
        return b""

    @property
    def principal(self) -> str:
        if self._principal is None:
            raise MisuseError("SASL/PLAIN: no principal before the exchange completes")
        return self._principal


# --- SCRAM (RFC 5802, RFC 7677) ----------------------------------------------------------------

def _saslname(username: str) -> str:
    """RFC 5802 section 5.1 (Kafka's ScramFormatter.saslName): ',' -> '=2C', '=' -> '=3D'."""
    return username.replace("=", "=3D").replace(",", "=2C")


def _username(saslname: str) -> str | None:
    """The inverse of `_saslname`; None for an '=' that escapes neither."""
    if re.search(r"=(?!2C|3D)", saslname):
        return None
    return saslname.replace("=2C", ",").replace("=3D", "=")


_B64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"                # RFC 5802 printable: %x21-2B / %x2D-7E
_VALUE = r"[^,\x00]+"
_NAME = r"(?:[^,=\x00]|=2C|=3D)+"                     # saslname (UTF-8 allowed)
_EXTENSIONS = r"(?:,[A-Za-z]+=" + _VALUE + r")*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_NAME}))?,)(?P<bare>n=(?P<name>{_NAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<ext>{_EXTENSIONS}))")
_SERVER_FIRST = re.compile(rf"r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_B64}),i=(?P<iterations>[0-9]{{1,9}}){_EXTENSIONS}")
_CLIENT_FINAL = re.compile(rf"(?P<without_proof>c=(?P<cbind>{_B64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_B64})")
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[^,=\x00]+)|v=(?P<signature>{_B64})){_EXTENSIONS}")


def _nonce() -> str:
    # 24 random bytes, base64url: printable, no ',' (RFC 5802's c-nonce / s-nonce)
    return secrets.token_urlsafe(24)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


class ScramClient(_Machine):
    """SCRAM-SHA-256 / SCRAM-SHA-512, the client side (Kafka's ScramSaslClient): the first
    message, the proof, then the server's signature checked.  `nonce` is for test vectors only."""

    def __init__(self, mechanism: str, username: str, password: PasswordLike, *,
                 tokenauth: bool = False, nonce: str | None = None) -> None:
        self._digest = _scram_digest(mechanism)
        self.mechanism = mechanism
        if not username:
            raise ValueError(f"{mechanism} needs a user name")
        self._username = username
        self._password = password if isinstance(password, Secret) else Secret(password)
        self._tokenauth = tokenauth
        self._nonce = _nonce() if nonce is None else nonce
        self._state = "start"
        self._first_bare = ""
        self._server_signature = b""

    def start(self) -> bytes:
        if self._state != "start":
            raise MisuseError(f"SASL/{self.mechanism}: start() was already called")
        self._state = "server-first"
        extensions = ",tokenauth=true" if self._tokenauth else ""
        self._first_bare = f"n={_saslname(self._username)},r={self._nonce}{extensions}"
        return ("n,," + self._first_bare).encode("utf-8")

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._failed or self._state == "start":
            raise MisuseError(f"SASL/{self.mechanism}: evaluate_challenge() before start() or after a failure")
        if self._state == "server-first":
            return self._client_final(bytes(challenge))
        if self._state == "server-final":
            self._check_server_final(bytes(challenge))
            return None
        raise self._fail("a challenge after the exchange completed")

    def _client_final(self, challenge: bytes) -> bytes:
        try:
            server_first = challenge.decode("ascii")
        except UnicodeDecodeError:
            raise self._fail("the server-first-message is not ASCII") from None
        match = _SERVER_FIRST.fullmatch(server_first)
        if match is None:
            raise self._fail(f"malformed server-first-message {_server_text(challenge)!r}")
        nonce, iterations = match["nonce"], int(match["iterations"])
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("the server nonce does not extend the client nonce")
        if iterations < SCRAM_MIN_ITERATIONS:
            raise self._fail(f"the server asks for {iterations} iterations, fewer than Kafka's "
                             f"minimum {SCRAM_MIN_ITERATIONS}")
        if iterations > SCRAM_CLIENT_MAX_ITERATIONS:
            raise self._fail(f"the server asks for {iterations} iterations, more than this client "
                             f"computes ({SCRAM_CLIENT_MAX_ITERATIONS})")
        salted = hashlib.pbkdf2_hmac(self._digest, _password_bytes(self._password),
                                     base64.b64decode(match["salt"]), iterations)
        without_proof = f"c=biws,r={nonce}"                   # biws = base64("n,,")
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode("utf-8")
        client_key = hmac.digest(salted, b"Client Key", self._digest)
        stored_key = hashlib.new(self._digest, client_key).digest()
        proof = _xor(client_key, hmac.digest(stored_key, auth_message, self._digest))
        self._server_signature = hmac.digest(hmac.digest(salted, b"Server Key", self._digest),
                                             auth_message, self._digest)
        self._state = "server-final"
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("ascii")

    def _check_server_final(self, challenge: bytes) -> None:
        match = _SERVER_FINAL.fullmatch(challenge.decode("utf-8", "replace"))
        if match is None:
            raise self._fail(f"malformed server-final-message {_server_text(challenge)!r}")
        if match["error"] is not None:
            raise self._fail(f"the server says {match['error']!r}")
        if not hmac.compare_digest(base64.b64decode(match["signature"]), self._server_signature):
            raise self._fail("the server's signature is wrong (it does not know the password)")
        self._state = "complete"
        self._complete = True

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism}, username={self._username!r})"


class ScramServer(_Machine):
    """SCRAM-SHA-256 / SCRAM-SHA-512, the server side: client-first -> server-first (nonce,
    salt, iterations), client-final -> the proof checked -> server-final (the server's
    signature).  Checks beyond Kafka's ScramSaslServer: the channel binding must be the gs2
    header the client sent (RFC 5802 section 5.1), ``m=`` fails the exchange (ibid.).  `nonce`
    is for test vectors only."""

    # salts for unknown users: stable for one name in this process, unrelated to any real one
    _UNKNOWN_KEY = secrets.token_bytes(32)

    def __init__(self, mechanism: str, store: CredentialStore, *, nonce: str | None = None) -> None:
        self._digest = _scram_digest(mechanism)
        self.mechanism = mechanism
        self._store = store
        self._server_nonce = _nonce() if nonce is None else nonce
        self._state = "client-first"
        self._credential: ScramCredential | None = None
        self._known = False
        self._username = ""
        self._gs2 = ""
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._principal: str | None = None

    def evaluate_response(self, response: bytes) -> bytes:
        self._check_usable()
        try:
            message = bytes(response).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("the message is not UTF-8") from None
        if self._state == "client-first":
            return self._server_first_message(message)
        return self._server_final_message(message)

    def _server_first_message(self, message: str) -> bytes:
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            raise self._fail("malformed client-first-message (only gs2 header 'n' without channel "
                             "binding is supported, and no 'm=')")
        username = _username(match["name"])
        if username is None:
            raise self._fail("the user name has an '=' that is not =2C or =3D")
        if match["authzid"] is not None and _username(match["authzid"]) != username:
            raise self._fail("the client asked for an authorization id other than its user name")
        extensions = dict(e.split("=", 1) for e in match["ext"][1:].split(",")) if match["ext"] else {}
        if extensions.get("tokenauth", "false").lower() == "true":
            raise self._fail("delegation tokens (tokenauth) are not supported here")
        credential = self._store.scram_credential(username, self.mechanism)
        self._known = credential is not None
        self._credential = credential or self._unknown_user(username)
        self._username, self._gs2, self._first_bare = username, match["gs2"], match["bare"]
        self._nonce = match["nonce"] + self._server_nonce
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        self._state = "client-final"
        return self._server_first.encode("ascii")

    def _unknown_user(self, username: str) -> ScramCredential:
        salt = hmac.digest(self._UNKNOWN_KEY, username.encode("utf-8"), "sha256")
        size = hashlib.new(self._digest).digest_size
        return ScramCredential(self.mechanism, salt, SCRAM_MIN_ITERATIONS, secrets.token_bytes(size),
                               secrets.token_bytes(size))

    def _server_final_message(self, message: str) -> bytes:
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None:
            raise self._fail("malformed client-final-message")
        if base64.b64decode(match["cbind"]) != self._gs2.encode("utf-8"):
            raise self._fail("the channel binding is not the client's gs2 header")
        if not hmac.compare_digest(match["nonce"].encode("ascii"), self._nonce.encode("ascii")):
            raise self._fail("the nonce is not the one of this exchange")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._first_bare},{self._server_first},{match['without_proof']}".encode("utf-8")
        proof = base64.b64decode(match["proof"])
        client_key = _xor(proof, hmac.digest(credential.stored_key, auth_message, self._digest))
        computed = hashlib.new(self._digest, client_key).digest()
        if len(proof) != len(credential.stored_key):
            raise self._fail(f"the proof has {len(proof)} bytes, not {len(credential.stored_key)}")
        if not hmac.compare_digest(computed, credential.stored_key) or not self._known:
            log.info("SASL/%s: authentication of %r failed", self.mechanism, self._username)
            raise self._fail("invalid user name or password")
        signature = hmac.digest(credential.server_key, auth_message, self._digest)
        self._principal = f"User:{self._username}"
        self._credential = None
        self._complete = True
        return b"v=" + base64.b64encode(signature)

    @property
    def principal(self) -> str:
        if self._principal is None:
            raise MisuseError(f"SASL/{self.mechanism}: no principal before the exchange completes")
        return self._principal


# --- OAUTHBEARER (RFC 7628) --------------------------------------------------------------------

class OAuthBearerClient(_Machine):
    """OAUTHBEARER, the client side (Kafka's OAuthBearerSaslClient).  `token` is a token or a
    callback giving one (`TokenCallback`), called at `start()`, so each (re-)authentication
    gets a fresh token."""

    mechanism = "OAUTHBEARER"

    def __init__(self, token: OAuthBearerToken | Secret | str | TokenCallback, *,
                 extensions: Mapping[str, str] | None = None) -> None:
        self._source = token
        self._extensions = dict(extensions or {})
        _check_extensions(self._extensions)
        self._state = "start"
        self._server_error: str | None = None
        self.token: OAuthBearerToken | None = None

    def _obtain(self) -> OAuthBearerToken:
        source = self._source
        if callable(source) and not isinstance(source, (OAuthBearerToken, Secret, str)):
            try:
                source = source()
            except Exception as exc:
                raise self._fail(f"the token callback raised {type(exc).__name__}") from exc
        if isinstance(source, OAuthBearerToken):
            return source
        if isinstance(source, str):
            return OAuthBearerToken(Secret(source))
        if isinstance(source, Secret):
            return OAuthBearerToken(source)
        raise self._fail(f"the token callback returned {type(source).__name__}, not a str or "
                         "OAuthBearerToken")

    def start(self) -> bytes:
        if self._state != "start":
            raise MisuseError("SASL/OAUTHBEARER: start() was already called")
        self._state = "server-first"
        token = self._obtain()
        value = token.value.reveal()
        if not _B64TOKEN.fullmatch(value):
            raise self._fail("the token is not an RFC 6750 b64token (letters, digits, -._~+/ and "
                             "trailing '=')")
        extensions = {**token.extensions, **self._extensions}
        try:
            _check_extensions(extensions)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        self.token = token
        pairs = "".join(f"\x01{k}={v}" for k, v in extensions.items())
        return f"n,,\x01auth=Bearer {value}{pairs}\x01\x01".encode("utf-8")

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._failed or self._state == "start":
            raise MisuseError("SASL/OAUTHBEARER: evaluate_challenge() before start() or after a failure")
        if self._state == "server-first":
            if not challenge:
                self._state = "complete"
                self._complete = True
                return None
            # RFC 7628 section 3.2.2: an error document; the client answers %x01 and the
            # server then fails the exchange
            self._server_error = _oauth_error(bytes(challenge))
            log.debug("SASL/OAUTHBEARER: the server refused the token: %s", self._server_error)
            self._state = "after-failure"
            return b"\x01"
        if self._state == "after-failure":
            raise self.failure()
        raise self._fail("a challenge after the exchange completed")

    @property
    def server_error(self) -> str | None:
        """The server's error document (status, scope), once it refused the token."""
        return self._server_error

    def failure(self) -> AuthenticationError:
        """The error to raise when the server ends the exchange after refusing the token."""
        return self._fail(f"the server refused the token ({self._server_error or 'no reason given'})")

    def __repr__(self) -> str:
        return "OAuthBearerClient()"


def _oauth_error(challenge: bytes) -> str:
    try:
        document = json.loads(challenge)
    except (ValueError, UnicodeDecodeError):
        return _server_text(challenge)
    if not isinstance(document, dict):
        return _server_text(challenge)
    return ", ".join(f"{k}={_server_text(str(v).encode(), 80)}" for k, v in document.items()
                     if k in ("status", "scope", "openid-configuration"))


# --- choosing a mechanism ----------------------------------------------------------------------

def client_for(security: ClientSecurity) -> SaslClient:
    """The client state machine `security` asks for (its sasl.mechanism and credentials)."""
    mechanism = security.sasl_mechanism
    if mechanism is None:
        raise ValueError(f"security.protocol {security.security_protocol} uses no SASL mechanism")
    if mechanism == "OAUTHBEARER":
        token = security.oauthbearer_token_source()
        return OAuthBearerClient(token, extensions=security.sasl_oauthbearer_extensions)
    username, password = security.sasl_username, security.sasl_password
    if username is None or password is None:
        raise ValueError(f"sasl.mechanism {mechanism} needs a user name and a password")
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    return ScramClient(mechanism, username, password, tokenauth=security.sasl_scram_tokenauth)


def server_for(mechanism: str, store: CredentialStore) -> PlainServer | ScramServer:
    """The server state machine for a mechanism the client chose in its SaslHandshake."""
    if mechanism == "PLAIN":
        return PlainServer(store)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServer(mechanism, store)
    raise ValueError(f"no server side for SASL mechanism {mechanism!r} (supported: "
                     f"{', '.join(SERVER_MECHANISMS)})")


# --- Kafka's protocol around SASL --------------------------------------------------------------

class SaslFlow(enum.Enum):
    """How the SASL tokens travel after a SaslHandshake."""

    #: SaslHandshake v0: each token is a 4-byte big-endian size and the bytes, with no Kafka
    #: request header or response (the flow of 0.10 clients); a failure closes the connection.
    RAW_TOKENS = 0
    #: SaslHandshake v1 (KIP-152): each token is a SaslAuthenticate request's auth_bytes, and a
    #: failure is its error code (SASL_AUTHENTICATION_FAILED) and message.
    AUTHENTICATE_REQUESTS = 1


def sasl_flow(handshake_version: int) -> SaslFlow:
    """The flow a client uses after a SaslHandshake of this version (Kafka has v0 and v1)."""
    if handshake_version == 0:
        return SaslFlow.RAW_TOKENS
    if handshake_version == 1:
        return SaslFlow.AUTHENTICATE_REQUESTS
    raise UnsupportedVersionError(f"SaslHandshake v{handshake_version} does not exist (Kafka has v0 and v1)")


def reauthentication_supported(authenticate_version: int) -> bool:
    """KIP-368: only SaslAuthenticate v1+ carries session_lifetime_ms, so only such clients
    re-authenticate; an older client's session still ends when its lifetime does (the server
    closes the connection)."""
    return authenticate_version >= 1


def session_lifetime_ms(connections_max_reauth_ms: int, credential_expiry_ms: int | None,
                        now_ms: int | None = None) -> int:
    """The session_lifetime_ms a server answers (KIP-368, Kafka's SaslServerAuthenticator): the
    time to the credential's expiry (a token's lifetime), or connections.max.reauth.ms, or the
    smaller of both; 0 = no limit (neither is set).  A negative time is 0, as Kafka's."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    max_reauth_set = connections_max_reauth_ms > 0
    if credential_expiry_ms is None:
        return connections_max_reauth_ms if max_reauth_set else 0
    remaining = credential_expiry_ms - now
    lifetime = min(remaining, connections_max_reauth_ms) if max_reauth_set else remaining
    return max(0, lifetime)


def reauthentication_delay_ms(session_lifetime: int, rng: random.Random | None = None) -> int | None:
    """When a client re-authenticates, in ms after authenticating (KIP-368): a random point
    between 85 % and 95 % of the server's session lifetime, as Kafka's clients pick it (room for
    latency and clock drift, and no storm of re-authentications at once); None when the
    lifetime is 0 (the session does not expire)."""
    if session_lifetime <= 0:
        return None
    fraction = 0.85 + (rng or random).random() * 0.10
    return int(session_lifetime * fraction)


def check_reauthentication(previous_mechanism: str, previous_principal: str,
                           mechanism: str, principal: str | None = None) -> None:
    """A re-authentication may change neither the mechanism (checked when the client names it
    in its SaslHandshake) nor the principal (checked when it completes), as Kafka's server."""
    if mechanism != previous_mechanism:
        raise AuthenticationError(f"SASL mechanism {mechanism!r} is not allowed for re-authentication "
                                  f"of a session authenticated with {previous_mechanism!r}")
    if principal is not None and principal != previous_principal:
        raise AuthenticationError(f"re-authentication may not change the principal "
                                  f"({previous_principal} -> {principal})")
