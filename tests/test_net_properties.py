"""kafkacodec.net.properties: Java .properties files as Kafka's tools read them (the JDK's own
parser as oracle), JAAS configs, and the typed ClientSecurity / BrokerSecurity settings; no
secret in any repr() or error message."""

from __future__ import annotations

import random

import pytest

from kafkacodec.net import BrokerSecurity, ClientSecurity, Secret, load_properties, parse_jaas_config, parse_properties
from kafkacodec.net.properties import expand_env
from security_support import java_properties

SECRET = "hunter2-SeCrEt"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


# --- java.util.Properties ---------------------------------------------------------------------

TRICKY = [
    b"a=b\nc:d\ne f\n",
    b"  key   =   value with trailing   \n",
    b"key\t:\tvalue\n\fkey2\f\fv\n",
    b"# comment\n! also comment\n  # indented comment\nreal=1\n",
    b"multi=first \\\n    second \\\n\tthird\n",
    b"even=ends with two \\\\\nnext=line\n",
    b"odd=ends with three \\\\\\\nnot.a.key=part of odd\n",
    b"comment.continued=a\\\n#not a comment\n",
    b"# a comment ends in a backslash \\\nstill=a key\n",
    b"\\\n#after a lone backslash\nk=v\n",
    b"blank.continuation=a\\\n\nb=c\n",
    b"eof.backslash=x\\",
    b"x=1\n\\\n",                  # a lone backslash, then the end: an empty key (Java's LineReader)
    b"x=1\n\\\r\n",                # ... but not after CR LF
    b"x=1\n\\",
    b"crlf=1\r\ncr=2\rlf=3\n",
    b"cr.continuation=a\\\r\n   b\n",
    b"esc\\=aped\\:key\\ name=v\\t\\n\\r\\f\\\\\\q\n",
    b"unicode=\\u00e9\\u4e2d\\uD83D\\uDE00\\uD800x\n",
    b"latin1=caf\xe9 \xff\n",
    b"key==value\nkey2::v\nkey3 = = v\nkey4 : :v\n",
    b"keyonly\nkeyonly2   \n=novalue\n:also\n",
    b"dup=1\ndup=2\n",
    b"bad=\\u12\n",
    b"bad2=\\uXYZW\n",
    b"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
    b"    username=\"alice\" \\\n    password=\"alice-secret\";\n",
]


def _random_properties(rng: random.Random) -> bytes:
    alphabet = [b" ", b"\t", b"\f", b"=", b":", b"\\", b"#", b"!", b"a", b"b", b"u", b"0", b"F", b"\n", b"\r",
                b"\r\n", b"\xe9", b"\\u00", b"\\u0041"]
    return b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))


def test_properties_are_read_as_javas_properties_load_reads_them(tmp_path):
    rng = random.Random(20240611)
    cases = TRICKY + [_random_properties(rng) for _ in range(300)]
    paths = []
    for i, data in enumerate(cases):
        path = tmp_path / f"{i}.properties"
        path.write_bytes(data)
        paths.append(path)
    expected = java_properties(paths)
    for path, data, java in zip(paths, cases, expected):
        try:
            ours = load_properties(path)
        except ValueError:
            ours = None
        assert ours == java, f"{data!r}: ours {ours!r}, Java's {java!r}"


def test_properties_rules_spelled_out():
    """The same rules without a JDK: what the docstring promises."""
    assert parse_properties("multi=first \\\n    second\n# c\n! c\nk : v\n") == {"multi": "first second", "k": "v"}
    assert parse_properties("a\\=b=c\\u0041\\t") == {"a=b": "cA\t"}
    assert parse_properties("x = y   ") == {"x": "y   "}            # trailing blanks kept
    assert parse_properties("emoji=\\uD83D\\uDE00") == {"emoji": "\U0001F600"}
    with pytest.raises(ValueError, match=r"my\.properties:3: malformed \\uXXXX"):
        parse_properties("a=1\n\nb=\\u12G4\n", source="my.properties")


# --- values ------------------------------------------------------------------------------------

def test_env_expansion_and_its_errors():
    env = {"PW": SECRET, "USER": "alice"}
    assert expand_env("${env:USER}:${env:PW}", key="k", environ=env) == f"alice:{SECRET}"
    assert expand_env("plain ${other:x} $ {env:USER}", key="k", environ=env) == "plain ${other:x} $ {env:USER}"
    with pytest.raises(ValueError, match=r"sasl.password: the environment variable MISSING .* is not set"):
        expand_env("${env:MISSING}", key="sasl.password", environ=env)
    with pytest.raises(ValueError, match="file config provider is not supported"):
        expand_env("${file:/etc/kafka/secrets.properties:password}", key="sasl.password", environ=env)
    security = ClientSecurity.from_properties(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "${env:USER}",
         "sasl.password": "${env:PW}",
         "sasl.jaas.config.unused": "x"}, environ=env)
    assert security.sasl_username == "alice" and security.sasl_password == Secret(SECRET)


# --- JAAS ----------------------------------------------------------------------------------------

def test_jaas_config_as_kafkas_jaasconfig_parses_it():
    [module] = parse_jaas_config(
        f"{SCRAM} required username=\"alice\" password='p\\\"w\\n\\101' /* comment */ tokenauth=true // eol\n"
        " extra=\"a;b=c\";")
    assert module.login_module == SCRAM and module.control_flag == "required"
    assert dict(module.options) == {"username": "alice", "password": 'p"w\nA', "tokenauth": "true",
                                    "extra": "a;b=c"}
    assert SECRET not in repr(parse_jaas_config(f"{PLAIN} required password=\"{SECRET}\";"))
    two = parse_jaas_config(f"{PLAIN} required; {SCRAM} optional;")
    assert [m.login_module for m in two] == [PLAIN, SCRAM]
    for bad, message in [("", "no login module"), (f"{PLAIN}", "control flag not specified"),
                         (f"{PLAIN} mandatory;", "invalid login module control flag"),
                         (f"{PLAIN} required username=\"a\"", "not terminated by ';'"),
                         (f"{PLAIN} required password=;", "value not specified for option 'password'"),
                         (f"{PLAIN} required password;", "value not specified for option 'password'")]:
        with pytest.raises(ValueError, match=message):
            parse_jaas_config(bad)


# --- ClientSecurity ------------------------------------------------------------------------------

def test_librdkafka_style_client(tmp_path):
    s = ClientSecurity.from_properties({
        "security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "alice",
        "sasl.password": SECRET, "ssl.ca.location": "/etc/ca.pem", "ssl.certificate.location": "/etc/c.pem",
        "ssl.key.location": "/etc/k.pem", "ssl.key.password": SECRET, "bootstrap.servers": "b:9093",
        "group.id": "g"})
    assert (s.security_protocol, s.sasl_mechanism, s.sasl_username) == ("SASL_SSL", "SCRAM-SHA-256", "alice")
    assert s.sasl_password == Secret(SECRET) and s.ssl_key_password == Secret(SECRET)
    assert (s.ssl_ca_location, s.ssl_certificate_location, s.ssl_key_location) == \
        ("/etc/ca.pem", "/etc/c.pem", "/etc/k.pem")
    assert s.ssl_endpoint_identification and s.ssl_certificate_verification
    assert dict(s.other) == {"bootstrap.servers": "b:9093", "group.id": "g"}
    assert s.uses_tls and s.uses_sasl
    assert SECRET not in repr(s) and SECRET not in str(s) and "group.id" in repr(s)


def test_java_style_client_with_pem_stores_and_jaas():
    s = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="bob" password="{SECRET}" tokenauth="true";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
        "ssl.keystore.type": "pem", "ssl.keystore.location": "/etc/ks.pem", "ssl.key.password": SECRET,
        "ssl.endpoint.identification.algorithm": ""})
    assert (s.sasl_username, s.sasl_scram_tokenauth) == ("bob", True)
    assert s.ssl_ca_location == "/etc/ca.pem" and s.ssl_certificate_location == "/etc/ks.pem"
    assert s.ssl_key_location is None and not s.ssl_endpoint_identification
    plain = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN} required username="carol" password="{SECRET}";'})
    assert plain.sasl_username == "carol" and plain.sasl_password == Secret(SECRET)


def test_plaintext_ignores_what_it_does_not_use():
    s = ClientSecurity.from_properties({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256", "sasl.mechanism": "GSSAPI",
                                        "sasl.password": SECRET})
    assert s.security_protocol == "PLAINTEXT" and not s.uses_tls and s.sasl_mechanism is None


def test_oauthbearer_sources():
    static = ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                                             "sasl.oauthbearer.token": "abc.def.ghi"})
    assert static.sasl_oauthbearer_token == Secret("abc.def.ghi")
    unsecured = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.config": "principal=alice scope=read,write lifeSeconds=60 extension_traceId=7"})
    token = unsecured.sasl_oauthbearer_callback()
    import base64
    import json
    header, payload, signature = token.value.reveal().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"} and signature == ""
    assert claims["sub"] == "alice" and claims["scope"] == ["read", "write"] and claims["exp"] - claims["iat"] == 60
    assert token.principal == "alice" and dict(token.extensions) == {"traceId": "7"}
    java = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": f'{OAUTH} required unsecuredLoginStringClaim_sub="bob" '
                            'unsecuredLoginListClaim_scope=",a,b" unsecuredLoginExtension_x="1";'})
    token = java.sasl_oauthbearer_callback()
    assert token.principal == "bob" and dict(token.extensions) == {"x": "1"}

    def callback():
        return "from.code"
    coded = ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
                                           oauthbearer_token_callback=callback)
    assert coded.sasl_oauthbearer_callback is callback and "callback" in repr(coded)
    with pytest.raises(ValueError, match="tokens come from one place"):
        ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                                        "sasl.oauthbearer.token": SECRET}, oauthbearer_token_callback=callback)
    with pytest.raises(ValueError, match="OIDC"):
        ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                                        "sasl.oauthbearer.method": "oidc"})


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "SASL_SSLL"}, "security.protocol='SASL_SSLL' is not one of"),
    ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism.*GSSAPI is not supported"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI is not supported"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": SECRET}, "needs a user name"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a"}, "needs a password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.pasword": SECRET},
     "unknown setting 'sasl.pasword': did you mean 'sasl.password'"),
    ({"security.protocol": "SSL", "ssl.ca.locaton": "/x"}, "did you mean 'ssl.ca.location'"),
    ({"securty.protocol": "SSL"}, "did you mean 'security.protocol'"),
    ({"security.protocol": "SSL", "ssl.cipher.suites": "X"}, "ssl.cipher.suites: choosing cipher suites"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/ks.jks", "ssl.keystore.password": SECRET},
     "ssl.keystore.password: a PEM keystore has no store password"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/ks.jks"}, "needs ssl.keystore.type=PEM.*JKS"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/ts", "ssl.truststore.type": "PKCS12"},
     "needs ssl.truststore.type=PEM"),
    ({"security.protocol": "SSL", "ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "'TLSv1.1' is refused"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}, "is not https, none"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/a", "ssl.truststore.type": "PEM",
      "ssl.truststore.location": "/b"}, "give the CA certificates once"),
    ({"security.protocol": "SSL", "ssl.key.location": "/k"}, "needs ssl.certificate.location"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": SECRET,
      "sasl.jaas.config": f'{PLAIN} required username="a" password="{SECRET}";'}, "give the credentials once"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN} required username="a" password="{SECRET}"; {PLAIN} required;'},
     "holds 2 login modules"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": f'{OAUTH} required password="{SECRET}";'}, "does not give a user name and password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"}, "disagree"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER needs a token"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.config": "scope=x"},
     "principal= is required"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
      "sasl.jaas.config": f'{OAUTH} required clientId="c" clientSecret="{SECRET}";'}, "OIDC"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a",
      "sasl.password": "${env:NOT_SET_ANYWHERE_42}"}, "NOT_SET_ANYWHERE_42"),
])
def test_client_errors_name_the_setting_never_the_secret(props, message):
    with pytest.raises(ValueError, match=message) as info:
        ClientSecurity.from_properties(props, environ={})
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None or SECRET not in str(info.value.__cause__)


def test_other_tools_keys_are_kept_and_known_ones_not_suggested_against():
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a",
             "sasl.password": SECRET, "ssl.keymanager.algorithm": "SunX509", "sasl.kerberos.service.name": "kafka",
             "schema.registry.url": "http://r", "basic.auth.user.info": "u:p", "config.providers": "env",
             "ssl.principal.mapping.rules": "DEFAULT"}
    s = ClientSecurity.from_properties(props)
    assert set(s.other) == {"ssl.keymanager.algorithm", "sasl.kerberos.service.name", "schema.registry.url",
                            "basic.auth.user.info", "config.providers", "ssl.principal.mapping.rules"}
    assert "u:p" not in repr(s)


def test_client_from_file_names_the_file(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=a\n"
                    f"sasl.passwrd={SECRET}\n")
    with pytest.raises(ValueError, match=rf"{path}: unknown setting 'sasl.passwrd': did you mean") as info:
        ClientSecurity.from_file(path)
    assert SECRET not in str(info.value)


# --- BrokerSecurity ------------------------------------------------------------------------------

def test_broker_listeners_protocol_map_and_prefixed_settings():
    s = BrokerSecurity.from_properties({
        "listeners": "SASL_SSL://127.0.0.1:0, INTERNAL://[::1]:9094,PLAINTEXT://:9092",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,INTERNAL:SSL,PLAINTEXT:PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/ks.pem", "ssl.key.password": SECRET,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem", "ssl.client.auth": "required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.internal.ssl.keystore.location": "/internal.pem",
        "connection.failed.authentication.delay.ms": "250", "connections.max.reauth.ms": "3600000",
        "kafkacodec.users.file": "/etc/users", "kafkacodec.acl.file": "/etc/acl", "log.dirs": "/var/kafka"})
    sasl, internal, plain = s.listeners
    assert (sasl.name, sasl.host, sasl.port, sasl.security_protocol) == ("SASL_SSL", "127.0.0.1", 0, "SASL_SSL")
    assert sasl.sasl_enabled_mechanisms == ("SCRAM-SHA-512", "PLAIN")
    # KIP-684: the broker-wide ssl.client.auth does not reach a SASL_SSL listener
    assert sasl.ssl.client_auth == "none" and sasl.ssl.keystore_location == "/ks.pem"
    assert (internal.host, internal.port, internal.security_protocol) == ("::1", 9094, "SSL")
    assert internal.ssl.client_auth == "required" and internal.ssl.keystore_location == "/internal.pem"
    assert internal.ssl.key_password == Secret(SECRET)
    assert plain.ssl is None and plain.host == "" and not plain.uses_sasl
    assert s.connection_failed_authentication_delay_ms == 250 and s.connections_max_reauth_ms == 3600000
    assert (s.users_file, s.acl_file, dict(s.other)) == ("/etc/users", "/etc/acl", {"log.dirs": "/var/kafka"})
    assert s.listener("internal") is internal
    assert SECRET not in repr(s)
    defaults = BrokerSecurity.from_properties({})
    assert [(l.name, l.host, l.port) for l in defaults.listeners] == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert defaults.connection_failed_authentication_delay_ms == 100 and defaults.connections_max_reauth_ms == 0
    assert defaults.sasl_server_max_receive_size == 524288


@pytest.mark.parametrize("props, message", [
    ({"listeners": "CLIENT://:9092"}, "listener CLIENT has no security protocol"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "the name PLAINTEXT is used twice"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, r"\*:9092 is used twice"),
    ({"listeners": "PLAINTEXT//:9092"}, "is not NAME://HOST:PORT"),
    ({"listeners": "SSL://:9093"}, "SSL listener SSL needs ssl.keystore.location"),
    ({"listeners": "SSL://:9093", "ssl.keystore.location": "/ks.jks", "ssl.key.password": SECRET},
     "needs ssl.keystore.type=PEM"),
    ({"listeners": "SSL://:9093", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/ks",
      "ssl.client.auth": "required"}, "needs ssl.truststore.location"),
    ({"listeners": "SSL://:9093", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/ks",
      "ssl.client.auth": "always"}, "ssl.client.auth='always' is not one of"),
    ({"listeners": "SASL_PLAINTEXT://:9092", "kafkacodec.users.file": "/u"}, "needs sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "GSSAPI", "kafkacodec.users.file": "/u"},
     "GSSAPI is not supported on the server side"),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "PLAIN"}, "needs kafkacodec.users.file"),
    ({"listener.name.client.ssl.keystore.location": "/ks"}, "no listener named 'client'"),
    ({"listener.name.plaintext.kafkacodec.users.file": "/u"}, "not a per-listener setting"),
    ({"kafkacodec.user.file": "/u"}, "did you mean 'kafkacodec.users.file'"),
    ({"connections.max.reauth.ms": "-1"}, "must be at least 0"),
    ({"connection.failed.authentication.delay.ms": "soon"}, "is not a whole number"),
])
def test_broker_errors(props, message):
    with pytest.raises(ValueError, match=message) as info:
        BrokerSecurity.from_properties(props)
    assert SECRET not in str(info.value)
