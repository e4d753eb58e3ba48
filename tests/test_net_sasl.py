"""kafkacodec.net.sasl: the SASL state machines against the RFCs' test vectors and against two
independent implementations (kafka-python's SCRAM, PLAIN and OAUTHBEARER clients; scramp's
SCRAM client and server), every refusal on both sides, Kafka's handshake flows and KIP-368's
re-authentication rules, and no secret in any message, repr or log line."""

from __future__ import annotations

import base64
import logging
import random

import pytest

from kafkacodec.errors import AuthenticationError, MisuseError, UnsupportedVersionError
from kafkacodec.net import (ClientSecurity, OAuthBearerClient, OAuthBearerToken, PlainClient, PlainCredential,
                            PlainServer, SaslFlow, ScramClient, ScramCredential, ScramServer, Secret,
                            check_reauthentication, client_for, reauthentication_delay_ms,
                            reauthentication_supported, sasl_flow, server_for, session_lifetime_ms)
from kafkacodec.net.sasl import SCRAM_CLIENT_MAX_ITERATIONS

PASSWORD = "pencil-SeCrEt"


class Store:
    """A CredentialStore in memory."""

    def __init__(self, **users: str) -> None:
        self.scram = {(name, m): ScramCredential.from_password(m, pw) for name, pw in users.items()
                      for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
        self.plain = {name: PlainCredential.from_password(pw) for name, pw in users.items()}

    def scram_credential(self, name, mechanism):
        return self.scram.get((name, mechanism))

    def plain_credential(self, name):
        return self.plain.get(name)


STORE = Store(alice=PASSWORD, **{"odd,name=x": PASSWORD})


# --- SCRAM: the RFC vectors --------------------------------------------------------------------

VECTORS = {
    # RFC 7677 section 3
    "SCRAM-SHA-256": ("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                      "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                      "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                      "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
    # the same exchange for SHA-512 (RFC 5802's style; the vector of draft-melnikov-scram-sha-512,
    # which Qpid Proton's and other SCRAM implementations test against)
    "SCRAM-SHA-512": ("r=rOprNGfwEbeRWgbNEkqO02431b08-2f89-4bad-a4e6-80c0564ec865,"
                      "s=Yin2FuHTt/M0kJWb0t9OI32n2VmOGi3m+JfjOvuDF88=,i=4096",
                      "c=biws,r=rOprNGfwEbeRWgbNEkqO02431b08-2f89-4bad-a4e6-80c0564ec865,"
                      "p=Hc5yec3NmCD7t+kFRw4/3yD6/F3SQHc7AVYschRja+Bc3sbdjlA0eH1OjJc0DD4ghn1tnXN5/Wr6qm9xmaHt4A==",
                      "v=BQuhnKHqYDwQWS5jAw4sZed+C9KFUALsbrq81bB0mh+bcUUbbMPNNmBIupnS2AmyyDnG5CTBQtkjJ9kyY4kzmw=="),
}


@pytest.mark.parametrize("mechanism", sorted(VECTORS))
def test_scram_client_reproduces_the_vector(mechanism):
    server_first, client_final, server_final = VECTORS[mechanism]
    client = ScramClient(mechanism, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.start() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.evaluate_challenge(server_first.encode()) == client_final.encode()
    assert not client.complete
    assert client.evaluate_challenge(server_final.encode()) is None and client.complete


@pytest.mark.parametrize("mechanism", sorted(VECTORS))
def test_scram_server_reproduces_the_vector(mechanism):
    server_first, client_final, server_final = VECTORS[mechanism]
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    credential = ScramCredential.from_password(mechanism, "pencil", iterations=4096,
                                               salt=base64.b64decode(fields["s"]))

    class One:
        def scram_credential(self, name, m):
            return credential if (name, m) == ("user", mechanism) else None

    server = ScramServer(mechanism, One(), nonce=fields["r"][len("rOprNGfwEbeRWgbNEkqO"):])
    assert server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == server_first.encode()
    assert server.evaluate_response(client_final.encode()) == server_final.encode()
    assert server.complete and server.principal == "User:user"


# --- SCRAM: independent implementations --------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_our_scram_server_against_kafka_pythons_client(mechanism):
    from kafka.net.sasl.scram import ScramClient as KafkaPythonClient

    theirs = KafkaPythonClient("alice", PASSWORD, mechanism)
    server = server_for(mechanism, STORE)
    server_first = server.evaluate_response(theirs.first_message())
    theirs.process_server_first_message(server_first)
    server_final = server.evaluate_response(theirs.final_message())
    theirs.process_server_final_message(server_final)          # raises on a wrong signature
    assert server.principal == "User:alice"
    wrong = KafkaPythonClient("alice", "not-" + PASSWORD, mechanism)
    server = server_for(mechanism, STORE)
    wrong.process_server_first_message(server.evaluate_response(wrong.first_message()))
    with pytest.raises(AuthenticationError, match="invalid user name or password"):
        server.evaluate_response(wrong.final_message())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scramp_both_ways(mechanism):
    scramp = pytest.importorskip("scramp", reason="scramp is in the [test] extra")
    m = scramp.ScramMechanism(mechanism)
    # the stored credential is the same as scramp derives for the same salt
    salt, stored_key, server_key, iterations = m.make_auth_info(PASSWORD, iteration_count=4096, salt=b"s" * 16)
    ours = ScramCredential.from_password(mechanism, PASSWORD, salt=b"s" * 16)
    assert (ours.stored_key, ours.server_key, ours.iterations) == (stored_key, server_key, iterations)
    # our client against scramp's server
    server = m.make_server(lambda name: (salt, stored_key, server_key, iterations) if name == "alice" else None)
    client = ScramClient(mechanism, "alice", PASSWORD)
    server.set_client_first(client.start().decode())
    client_final = client.evaluate_challenge(server.get_server_first().encode())
    server.set_client_final(client_final.decode())
    assert client.evaluate_challenge(server.get_server_final().encode()) is None and client.complete
    # scramp's client against our server
    theirs = scramp.ScramClient([mechanism], "alice", PASSWORD)
    ours_server = server_for(mechanism, STORE)
    theirs.set_server_first(ours_server.evaluate_response(theirs.get_client_first().encode()).decode())
    theirs.set_server_final(ours_server.evaluate_response(theirs.get_client_final().encode()).decode())
    assert ours_server.principal == "User:alice"


def test_scram_names_with_commas_and_equals_round_trip():
    client = ScramClient("SCRAM-SHA-256", "odd,name=x", PASSWORD)
    server = server_for("SCRAM-SHA-256", STORE)
    first = client.start()
    assert first.startswith(b"n,,n=odd=2Cname=3Dx,r=")
    final = server.evaluate_response(client.evaluate_challenge(server.evaluate_response(first)))
    assert client.evaluate_challenge(final) is None
    assert server.principal == "User:odd,name=x"


# --- SCRAM: refusals ---------------------------------------------------------------------------

def _exchange(client, server):
    """Run a whole exchange; the server's principal."""
    final = server.evaluate_response(client.evaluate_challenge(server.evaluate_response(client.start())))
    assert client.evaluate_challenge(final) is None
    return server.principal


def test_scram_wrong_password_and_unknown_user_fail_alike():
    errors = []
    firsts = []
    for name, password in [("alice", "wrong"), ("mallory", PASSWORD), ("mallory", "other")]:
        client = ScramClient("SCRAM-SHA-512", name, password)
        server = server_for("SCRAM-SHA-512", STORE)
        first = server.evaluate_response(client.start())            # an unknown user gets a challenge too
        fields = dict(item.split("=", 1) for item in first.decode().split(","))
        firsts.append((name, fields["s"], fields["i"]))
        with pytest.raises(AuthenticationError) as info:
            server.evaluate_response(client.evaluate_challenge(first))
        errors.append(str(info.value))
        with pytest.raises(MisuseError, match="already failed"):
            server.evaluate_response(b"c=biws")
    assert len(set(errors)) == 1 and "invalid user name or password" in errors[0]
    assert firsts[1][1:] == firsts[2][1:] and firsts[1][2] == "4096"   # a stable salt per unknown name
    assert len(base64.b64decode(firsts[1][1])) == len(base64.b64decode(firsts[0][1]))


def _tampered_final(change):
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
    server = server_for("SCRAM-SHA-256", STORE)
    final = client.evaluate_challenge(server.evaluate_response(client.start())).decode()
    return server, change(final).encode()


@pytest.mark.parametrize("change, message", [
    (lambda f: f.replace("c=biws", "c=eSws"), "channel binding"),
    (lambda f: f.replace(",p=", "x,p="), "the nonce is not the one of this exchange"),
    (lambda f: f[:f.index(",p=")] + ",p=" + base64.b64encode(b"x" * 32).decode(), "invalid user name or password"),
    (lambda f: f[:f.index(",p=")] + ",p=" + base64.b64encode(b"x" * 16).decode(), "the proof has 16 bytes"),
    (lambda f: f.replace("p=", "q="), "malformed client-final-message"),
])
def test_scram_server_refuses_tampered_final_messages(change, message):
    server, final = _tampered_final(change)
    with pytest.raises(AuthenticationError, match=message):
        server.evaluate_response(final)


@pytest.mark.parametrize("first, message", [
    (b"n,a=bob,n=alice,r=abc", "authorization id other than its user name"),
    (b"y,,n=alice,r=abc", "malformed client-first-message"),
    (b"p=tls-unique,,n=alice,r=abc", "malformed client-first-message"),
    (b"n,,m=ext,n=alice,r=abc", "malformed client-first-message"),
    (b"n,,n=al=ice,r=abc", "malformed client-first-message|'=' that is not"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens"),
    (b"n,,n=alice,r=a\xffbc", "not UTF-8"),
    (b"", "malformed"),
])
def test_scram_server_refuses_bad_first_messages(first, message):
    with pytest.raises(AuthenticationError, match=message):
        server_for("SCRAM-SHA-256", STORE).evaluate_response(first)


def test_scram_server_accepts_the_users_own_authzid():
    client_first = b"n,a=alice,n=alice,r=abcdef"
    server = server_for("SCRAM-SHA-256", STORE)
    assert server.evaluate_response(client_first).startswith(b"r=abcdef")


@pytest.mark.parametrize("server_first, message", [
    (lambda n: f"r=other{n},s=c2FsdA==,i=4096", "does not extend the client nonce"),
    (lambda n: f"r={n},s=c2FsdA==,i=4096", "does not extend the client nonce"),
    (lambda n: f"r={n}x,s=c2FsdA==,i=4095", "fewer than Kafka's minimum 4096"),
    (lambda n: f"r={n}x,s=c2FsdA==,i={SCRAM_CLIENT_MAX_ITERATIONS + 1}", "more than this client computes"),
    (lambda n: f"m=x,r={n}x,s=c2FsdA==,i=4096", "malformed server-first-message"),
    (lambda n: f"r={n}x,s=not base64,i=4096", "malformed server-first-message"),
])
def test_scram_client_refuses_bad_server_first_messages(server_first, message):
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD, nonce="cnonce")
    client.start()
    with pytest.raises(AuthenticationError, match=message):
        client.evaluate_challenge(server_first("cnonce").encode())


def test_scram_client_checks_the_server_signature_and_reports_errors():
    for final, message in [(b"v=" + base64.b64encode(b"\0" * 32), "signature is wrong"),
                           (b"e=invalid-proof", "the server says 'invalid-proof'"),
                           (b"x=1", "malformed server-final-message")]:
        client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
        server = server_for("SCRAM-SHA-256", STORE)
        client.evaluate_challenge(server.evaluate_response(client.start()))
        with pytest.raises(AuthenticationError, match=message):
            client.evaluate_challenge(final)


def test_scram_tokenauth_extension_is_sent():
    client = ScramClient("SCRAM-SHA-256", "tokenid", "hmac", tokenauth=True)
    assert client.start().endswith(b",tokenauth=true")


# --- PLAIN ------------------------------------------------------------------------------------

def test_plain_both_sides_and_kafka_pythons_bytes():
    from kafka.net.sasl.plain import SaslMechanismPlain

    client = PlainClient("alice", PASSWORD)
    message = client.start()
    assert message == b"\0alice\0" + PASSWORD.encode() and client.complete
    assert client.evaluate_challenge(b"") is None
    server = PlainServer(STORE)
    assert server.evaluate_response(message) == b"" and server.principal == "User:alice"
    theirs = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password=PASSWORD).auth_bytes()
    assert theirs == b"alice\0alice\0" + PASSWORD.encode()             # authzid = the user: accepted
    assert PlainServer(STORE).evaluate_response(theirs) == b""


@pytest.mark.parametrize("message, error", [
    (b"\0alice\0wrong", "invalid user name or password"),
    (b"\0mallory\0" + PASSWORD.encode(), "invalid user name or password"),
    (b"bob\0alice\0" + PASSWORD.encode(), "authorization id other than its user name"),
    (b"\0alice", "expected 3 NUL-separated fields"),
    (b"\0alice\0pw\0more", r"expected 3 NUL-separated fields \(RFC 4616\), got 4"),
    (b"\0\0pw", "no user name"),
    (b"\0alice\0", "no password"),
    (b"\0al\xffice\0pw", "not UTF-8"),
])
def test_plain_server_refusals(message, error):
    with pytest.raises(AuthenticationError, match=error) as info:
        PlainServer(STORE).evaluate_response(message)
    assert PASSWORD not in str(info.value)


# --- OAUTHBEARER ------------------------------------------------------------------------------

def test_oauthbearer_first_message_matches_kafka_python():
    from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

    class Provider(AbstractTokenProvider):
        def token(self):
            return "eyJh.eyJz.sig"

        def extensions(self):
            return {"traceId": "abc", "logicalCluster": "lkc-1"}

    theirs = SaslMechanismOAuth(sasl_oauth_token_provider=Provider()).auth_bytes()
    ours = OAuthBearerClient("eyJh.eyJz.sig", extensions={"traceId": "abc", "logicalCluster": "lkc-1"}).start()
    assert ours == theirs == b"n,,\x01auth=Bearer eyJh.eyJz.sig\x01traceId=abc\x01logicalCluster=lkc-1\x01\x01"


def test_oauthbearer_success_and_kafkas_failure_exchange():
    client = OAuthBearerClient(Secret("tok.en"))
    assert client.start() == b"n,,\x01auth=Bearer tok.en\x01\x01"
    assert client.evaluate_challenge(b"") is None and client.complete
    client = OAuthBearerClient("tok.en")
    client.start()
    assert client.evaluate_challenge(b'{"status":"invalid_token","scope":"kafka"}') == b"\x01"
    assert client.server_error == "status=invalid_token, scope=kafka" and not client.complete
    with pytest.raises(AuthenticationError, match="refused the token.*invalid_token"):
        client.evaluate_challenge(b"anything")


def test_oauthbearer_token_callback_is_called_per_authentication():
    calls = []

    def callback():
        calls.append(1)
        return OAuthBearerToken(Secret(f"t{len(calls)}"), lifetime_ms=123, extensions={"a": "b"})

    assert OAuthBearerClient(callback).start() == b"n,,\x01auth=Bearer t1\x01a=b\x01\x01"
    assert OAuthBearerClient(callback).start().startswith(b"n,,\x01auth=Bearer t2")

    def broken():
        raise RuntimeError(f"token endpoint said {PASSWORD}")

    with pytest.raises(AuthenticationError, match="the token callback raised RuntimeError") as info:
        OAuthBearerClient(broken).start()
    assert PASSWORD not in str(info.value)
    with pytest.raises(AuthenticationError, match="not an RFC 6750 b64token") as info:
        OAuthBearerClient(f"has space {PASSWORD}").start()
    assert PASSWORD not in str(info.value)
    with pytest.raises(ValueError, match="extension name 'auth'"):
        OAuthBearerClient("t", extensions={"auth": "x"})


# --- choosing, misuse --------------------------------------------------------------------------

def test_client_for_each_mechanism():
    base = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice", "sasl.password": PASSWORD}
    for mechanism, cls in [("PLAIN", PlainClient), ("SCRAM-SHA-256", ScramClient), ("SCRAM-SHA-512", ScramClient)]:
        client = client_for(ClientSecurity.from_properties({**base, "sasl.mechanism": mechanism}))
        assert isinstance(client, cls) and client.mechanism == mechanism
        assert PASSWORD not in repr(client)
    oauth = client_for(ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                                                       "sasl.oauthbearer.config": "principal=alice"}))
    assert oauth.start().startswith(b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.")
    with pytest.raises(ValueError, match="uses no SASL"):
        client_for(ClientSecurity.from_properties({}))
    with pytest.raises(ValueError, match="no server side for SASL mechanism 'OAUTHBEARER'"):
        server_for("OAUTHBEARER", STORE)


def test_calls_in_the_wrong_state_are_misuse():
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
    with pytest.raises(MisuseError):
        client.evaluate_challenge(b"r=x")
    client.start()
    with pytest.raises(MisuseError):
        client.start()
    server = server_for("PLAIN", STORE)
    with pytest.raises(MisuseError):
        server.principal
    server.evaluate_response(b"\0alice\0" + PASSWORD.encode())
    with pytest.raises(MisuseError, match="complete"):
        server.evaluate_response(b"\0alice\0" + PASSWORD.encode())


# --- Kafka's protocol around SASL --------------------------------------------------------------

def test_handshake_versions_and_reauthentication_rules():
    assert sasl_flow(0) is SaslFlow.RAW_TOKENS and sasl_flow(1) is SaslFlow.AUTHENTICATE_REQUESTS
    with pytest.raises(UnsupportedVersionError):
        sasl_flow(2)
    assert not reauthentication_supported(0) and reauthentication_supported(1) and reauthentication_supported(2)
    # the server's session lifetime (Kafka's SaslServerAuthenticator)
    assert session_lifetime_ms(0, None, now_ms=0) == 0
    assert session_lifetime_ms(60_000, None, now_ms=0) == 60_000
    assert session_lifetime_ms(0, 5_000, now_ms=1_000) == 4_000
    assert session_lifetime_ms(60_000, 5_000, now_ms=1_000) == 4_000
    assert session_lifetime_ms(3_000, 5_000, now_ms=1_000) == 3_000
    assert session_lifetime_ms(60_000, 500, now_ms=1_000) == 0       # expired: zeroIfNegative, as Kafka
    # the client's point: 85 % .. 95 % of the lifetime
    rng = random.Random(7)
    delays = [reauthentication_delay_ms(100_000, rng) for _ in range(2000)]
    assert 85_000 <= min(delays) < 86_000 and 94_000 < max(delays) <= 95_000
    assert reauthentication_delay_ms(0) is None
    check_reauthentication("SCRAM-SHA-256", "User:alice", "SCRAM-SHA-256", "User:alice")
    with pytest.raises(AuthenticationError, match="not allowed for re-authentication"):
        check_reauthentication("SCRAM-SHA-256", "User:alice", "PLAIN")
    with pytest.raises(AuthenticationError, match="may not change the principal"):
        check_reauthentication("PLAIN", "User:alice", "PLAIN", "User:bob")


# --- secrets -----------------------------------------------------------------------------------

def test_no_secret_in_logs_reprs_or_errors(caplog):
    caplog.set_level(logging.DEBUG)
    seen = []
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        _exchange(ScramClient(mechanism, "alice", PASSWORD), server_for(mechanism, STORE))
        for password in ("wrong-" + PASSWORD, PASSWORD):
            client = ScramClient(mechanism, "mallory", password)
            server = server_for(mechanism, STORE)
            with pytest.raises(AuthenticationError) as info:
                server.evaluate_response(client.evaluate_challenge(server.evaluate_response(client.start())))
            seen.append(str(info.value))
    for message in (b"\0alice\0wrong-" + PASSWORD.encode(), b"\0alice\0" + PASSWORD.encode()):
        try:
            PlainServer(STORE).evaluate_response(message)
        except AuthenticationError as exc:
            seen.append(str(exc))
    oauth = OAuthBearerClient(PASSWORD.replace("-", "."))
    oauth.start()
    oauth.evaluate_challenge(b'{"status":"invalid_token"}')
    seen.append(str(oauth.failure()))
    seen += [repr(x) for x in (Secret(PASSWORD), f"{Secret(PASSWORD)}", STORE.scram[("alice", "SCRAM-SHA-256")],
                               STORE.plain["alice"], OAuthBearerToken(Secret(PASSWORD)), oauth,
                               ScramClient("SCRAM-SHA-256", "alice", PASSWORD), PlainClient("alice", PASSWORD))]
    text = "\n".join(seen + [r.getMessage() for r in caplog.records])
    assert "alice" in text and PASSWORD not in text and PASSWORD.replace("-", ".") not in text
    with pytest.raises(TypeError, match="not pickled"):
        import pickle
        pickle.dumps(Secret(PASSWORD))
