"""Kafka's SASL exchange on a connection, both sides (KIP-43, KIP-152, KIP-368), over the
mechanisms of kafkacodec.net.sasl.

Server side (`ServerAuthenticator`, one per connection of a SASL listener): until the client
has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are served (anything
else closes the connection, as Kafka's SaslServerAuthenticator).  After SaslHandshake v1 the
tokens come in SaslAuthenticate requests and a refusal is SASL_AUTHENTICATION_FAILED with a
message; after SaslHandshake v0 (0.9/0.10 clients, which Kafka 4 no longer serves) they come as
raw size-prefixed frames without a Kafka header, answered the same way, and a refusal closes the
connection.  A refusal is answered only after `connection.failed.authentication.delay.ms`, then
the connection closes.  With `connections.max.reauth.ms` the session ends after that long: a
client that re-authenticates (SaslHandshake + SaslAuthenticate again, same mechanism and
principal) continues, any other request after the end closes the connection.

Client side (`ClientAuthenticator`): SaslHandshake v1 with the mechanism of the client's
settings, then SaslAuthenticate until the mechanism completes; the session lifetime the broker
answers schedules a re-authentication at 85-95 % of it.

Neither side ever puts a secret in a message, log line or exception.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import Any

from kafkacodec.errors import AuthenticationError, KafkaCodecError
from kafkacodec.net import sasl
from kafkacodec.net.connection import AUTH_FAILED, Connection, request_done
from kafkacodec.net.pieces import BytesPiece
from kafkacodec.protocol import messages
from kafkacodec.protocol.api import ApiKey, Error

__all__ = ["ServerAuthenticator", "ClientAuthenticator", "SASL_APIS"]

log = logging.getLogger("kafkacodec.net")

#: The requests a connection may send before it has authenticated.
SASL_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_SIZE = struct.Struct(">i")
HANDSHAKE, AUTHENTICATE, DONE, FAILED = "handshake", "authenticate", "done", "failed"


class ServerAuthenticator:
    """The server side of one connection's SASL exchange (see the module)."""

    def __init__(self, conn: Connection, mechanisms: tuple[str, ...], store: sasl.CredentialStore, *,
                 failed_delay_s: float = 0.1, max_reauth_ms: int = 0, max_receive_size: int = 524288):
        self.conn = conn
        self.mechanisms = mechanisms
        self.store = store
        self.failed_delay_s = failed_delay_s
        self.max_reauth_ms = max_reauth_ms
        self.max_receive_size = max_receive_size
        self.state = HANDSHAKE
        self.raw = False                       # SaslHandshake v0: raw tokens follow
        self.mechanism: str | None = None
        self.server: Any = None
        self.principal: str | None = None      # once authenticated (kept while re-authenticating)
        self.session_end: float | None = None  # time.monotonic() the session ends (KIP-368)
        self.authenticate_version = 0

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def expects_raw_token(self) -> bool:
        """The next frame is a raw SASL token (after SaslHandshake v0), not a Kafka request."""
        return self.raw and self.state == AUTHENTICATE

    def allows(self, api_key: int) -> bool:
        """Whether a request of `api_key` may be served now (the session checked too)."""
        if api_key in SASL_APIS:
            return True
        if not self.authenticated:
            return False
        return self.session_end is None or time.monotonic() < self.session_end

    def refusal(self, api_key: int) -> str:
        if not self.authenticated:
            return f"{ApiKey.name_of(api_key)} request before SASL authentication"
        return "the SASL session expired (connections.max.reauth.ms) without re-authentication"

    # --- SaslHandshake ------------------------------------------------------------------------
    def handshake(self, version: int, mechanism: str) -> dict[str, Any]:
        """The SaslHandshake answer (the body's fields); the exchange starts."""
        if mechanism not in self.mechanisms:
            self.state = FAILED if not self.authenticated else self.state
            return {"error_code": Error.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(self.mechanisms)}
        if self.authenticated:                 # KIP-368 re-authentication
            assert self.mechanism is not None and self.principal is not None
            try:
                sasl.check_reauthentication(self.mechanism, self.principal, mechanism)
            except AuthenticationError:
                return {"error_code": Error.ILLEGAL_SASL_STATE, "mechanisms": list(self.mechanisms)}
        elif self.state != HANDSHAKE:
            return {"error_code": Error.ILLEGAL_SASL_STATE, "mechanisms": list(self.mechanisms)}
        self.mechanism = mechanism
        self.server = sasl.server_for(mechanism, self.store)
        self.raw = sasl.sasl_flow(version) is sasl.SaslFlow.RAW_TOKENS
        self.state = AUTHENTICATE
        return {"error_code": Error.NONE, "mechanisms": list(self.mechanisms)}

    # --- the tokens ---------------------------------------------------------------------------
    def step(self, token: bytes, version: int = -1) -> tuple[bytes | None, str | None]:
        """Evaluate one client token: (the challenge to send, None) while it goes on or once it
        succeeded, (None, the reason) when it failed (the caller answers after the delay and
        closes).  `version`: the SaslAuthenticate version (-1 for a raw token)."""
        if self.state != AUTHENTICATE or self.server is None:
            return None, "SaslAuthenticate before SaslHandshake"
        if len(token) > self.max_receive_size:
            self.state = FAILED
            return None, f"a SASL token of {len(token)} bytes, more than sasl.server.max.receive.size"
        try:
            challenge = self.server.evaluate_response(bytes(token))
        except AuthenticationError as exc:
            self.state = FAILED
            return None, str(exc)
        if self.server.complete:
            principal = self.server.principal
            if self.principal is not None and principal != self.principal:
                self.state = FAILED
                return None, f"re-authentication may not change the principal ({self.principal})"
            self.principal = principal
            self.conn.principal = principal
            self.state = DONE
            self.authenticate_version = version
            lifetime = sasl.session_lifetime_ms(self.max_reauth_ms, None)
            self.session_end = time.monotonic() + lifetime / 1000 if lifetime else None
        return challenge, None

    def session_lifetime_ms(self) -> int:
        """What the SaslAuthenticate v1+ answer says of the session (0: no end)."""
        if self.session_end is None:
            return 0
        return max(0, int((self.session_end - time.monotonic()) * 1000))

    def raw_token(self, body: bytes) -> None:
        """A raw token (SaslHandshake v0 flow): answered as a raw frame, or, refused, the
        connection closed after the delay."""
        challenge, failure = self.step(body)
        conn = self.conn
        if failure is not None:
            self.fail(failure, [])
            return
        # (Kafka answers each token with a frame, an empty one when the mechanism has nothing)
        frame = _SIZE.pack(len(challenge or b"")) + (challenge or b"")
        conn.send([BytesPiece(frame)], on_sent=lambda: request_done(conn))

    def fail(self, reason: str, answer: list[Any]) -> None:
        """Refused: after connection.failed.authentication.delay.ms, send `answer` (pieces; none
        for a raw token) and close."""
        conn = self.conn
        self.state = FAILED
        log.info("%s: SASL authentication failed: %s", conn.name, reason)

        def answer_and_close() -> None:
            if conn.closed:
                return
            if answer:
                conn.send(answer, on_sent=lambda: conn.close(reason, AUTH_FAILED))
            else:
                conn.close(reason, AUTH_FAILED)
        conn.loop.call_later(self.failed_delay_s, answer_and_close)


class ClientAuthenticator:
    """The client side of one connection's SASL exchange, started once the broker's api versions
    are known.  `send(api_key, message, on_answer, on_error)` sends a request on the connection
    (the Cluster's); `done()` runs once authenticated, `failed(error)` when refused or broken;
    `reauthenticate_in(seconds)` is scheduled by the owner (KIP-368)."""

    def __init__(self, security: Any, send: Callable[[int, Any, Callable[[Any], None]], None],
                 done: Callable[[int], None], failed: Callable[[BaseException], None]):
        self.security = security
        self.send = send                       # (api key, control.Outgoing, on_answer)
        self.done = done                       # (session lifetime ms)
        self.failed = failed
        self.mechanism: str = security.sasl_mechanism
        self.client: Any = None

    def start(self) -> None:
        from kafkacodec.protocol import control

        try:
            self.client = sasl.client_for(self.security)
        except (ValueError, KafkaCodecError) as exc:
            self.failed(AuthenticationError(f"SASL: {exc}"))
            return
        self.send(ApiKey.SASL_HANDSHAKE, control.sasl_handshake_request(self.mechanism), self._handshaken)

    def _handshaken(self, answer: Any) -> None:
        if answer.error_code == Error.UNSUPPORTED_SASL_MECHANISM:
            self.failed(AuthenticationError(
                f"the broker does not enable SASL mechanism {self.mechanism} (it enables "
                f"{', '.join(answer.mechanisms) or 'none'})"))
            return
        if answer.error_code:
            self.failed(AuthenticationError(f"SaslHandshake failed: {Error.name_of(answer.error_code)}"))
            return
        try:
            first = self.client.start()
        except (AuthenticationError, ValueError) as exc:
            self.failed(exc if isinstance(exc, AuthenticationError) else AuthenticationError(str(exc)))
            return
        self._token(first)

    def _token(self, token: bytes) -> None:
        from kafkacodec.protocol import control

        self.send(ApiKey.SASL_AUTHENTICATE, control.sasl_authenticate_request(token), self._answered)

    def _answered(self, answer: Any) -> None:
        if answer.error_code:
            message = answer.error_message or Error.name_of(answer.error_code)
            self.failed(AuthenticationError(f"SASL {self.mechanism} authentication failed: {message}"))
            return
        try:
            reply = self.client.evaluate_challenge(bytes(answer.auth_bytes or b""))
        except AuthenticationError as exc:
            self.failed(exc)
            return
        if reply is not None:                  # the mechanism goes on (or ends with a last message)
            self._token(reply)
            return
        self.done(int(getattr(answer, "session_lifetime_ms", 0) or 0))
