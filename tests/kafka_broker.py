"""A real Apache Kafka broker for the tests: one KRaft node (broker + controller) on loopback,
run from Kafka's own jars on Maven Central (resolved with `mvn`, cached outside the repository in
~/.cache/kafkacodec/kafka-<version>/; nothing is committed).

    with KafkaBroker.start("4.1.1") as broker:      # or the `kafka_broker` fixture (conftest.py)
        broker.bootstrap                             # "127.0.0.1:PORT"

Versions: 4.x is what current clusters run (the mirror's target, `serve --upstream`'s upstream);
3.9.x is the last line with down-conversion (the reference for what old consumers receive).
Command line (for benchmarks and by hand): `python tests/kafka_broker.py [--version V]
[--secured]` starts one, prints `bootstrap HOST:PORT` (and with --secured each listener and the
certificate folder), and stops on Ctrl-C / SIGTERM.  The broker's log (slf4j-simple, INFO) is
`broker.workdir / "broker.log"`: `log_tail()`, or `log_mark()` then `log_since(mark)`.

TLS and SASL.  The `kafka_broker_secured` fixture (conftest.py, one start per test module,
5-10 s) is a 4.x broker with three listeners: PLAINTEXT (the broker's own traffic;
`broker.bootstrap`, `create_topic` use it), SASL_SSL (SCRAM-SHA-256 user alice/alice-secret,
SCRAM-SHA-512 carol/carol-secret -- each for that mechanism only -- and PLAIN bob/bob-secret)
and SSL (a client certificate signed by the test CA required); `broker.bootstrap_of("SASL_SSL")`
and `broker.bootstrap_of("SSL")` are their addresses.  `broker.security` is the `SecurityFiles`
(made with trustme in the module's tmp folder): `.ca` (CA file), `.server` (127.0.0.1/localhost:
`.cert`, `.key`, `.keystore` = key + chain, Kafka's PEM keystore; a test server such as
`kafkacodec serve` can use the same), `.client` (accepted client certificate), `.stranger` (one
from another CA: refused), `.other_ca` (did not sign the broker), `.users` (mechanism -> (user,
password)), and each client's settings, wrong ones on request:

    files = broker.security
    files.librdkafka(broker.bootstrap_of("SASL_SSL"), "SASL_SSL", "SCRAM-SHA-512")   # confluent-kafka
    files.librdkafka(addr, "SSL")                        # client certificate by default over SSL
    files.librdkafka(addr, "SASL_SSL", "PLAIN", password="wrong")    # or user=, cert=, ca=files.other_ca
    files.kafka_python(addr, "SASL_SSL", "PLAIN"); files.aiokafka(addr, "SSL")       # keyword arguments
    files.java("SASL_SSL", "SCRAM-SHA-256")              # Java / kafkacodec ClientSecurity: PEM stores
    files.java("SSL", jks=True)                          # JKS stores (keytool) for kafka-clients < 2.7
    files.broker_properties()                            # the broker's own TLS/SASL server.properties
    files.kafkacodec_users_file()                        # the same users for `kafkacodec serve`

Kafka's Java consumer is tests/java/ServeConsumer.java (compiled per test module against
`client_classpath(version)`: any kafka-clients on Maven Central, 4.1.1 and 0.10.2.2 are tried):
serve_support.java_read(cp, classes, bootstrap, want, config=files.java(...), group=None|"g")
returns what it read as {(topic, partition): [(offset, key, value)]}; run_java_consumer gives the
CompletedProcess (exit 1 and "failed: <exception>: <message>" on stderr when the client raised,
2 on timeout); watch_java_consumer stops it at a log line, for a client that fails silently
in a loop (0.10.2.2 against Kafka 4: it authenticates, then every Fetch is "too new").
tests/test_kafka_broker.py shows each, with what Kafka 4.1 answers to wrong credentials.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_VERSION = "4.1.1"
DOWNCONVERSION_VERSION = "3.9.1"      # Kafka 4.0 removed down-conversion (KIP-896)
CACHE = Path(os.environ.get("KAFKACODEC_JAR_CACHE", Path.home() / ".cache" / "kafkacodec"))

SLF4J_SIMPLE = "1.7.36"                # the slf4j 1.7 API Kafka 4.1's jars and 0.10.2's use


class BrokerUnavailable(RuntimeError):
    """Java or Maven is missing, or the jars could not be resolved."""


class BrokerExited(BrokerUnavailable):
    """The broker process exited while starting (its log's errors in the message)."""


def _pom(artifact: str, version: str, extra: tuple[tuple[str, ...], ...] = (), classifier: str = "") -> str:
    # slf4j-simple: Kafka logs through slf4j and the artifacts bring no binding (the distribution
    # adds log4j's); without one the broker's and the clients' logs would be silently dropped
    deps = [("org.apache.kafka", artifact, version, classifier), ("org.slf4j", "slf4j-simple", SLF4J_SIMPLE),
            *extra]
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>\n"
            f"<groupId>kafkacodec.tests</groupId><artifactId>{artifact}-env</artifactId><version>1</version>\n"
            "<dependencies>\n"
            + "".join(f"<dependency><groupId>{d[0]}</groupId><artifactId>{d[1]}</artifactId><version>{d[2]}</version>"
                      + (f"<classifier>{d[3]}</classifier>" if len(d) > 3 and d[3] else "") + "</dependency>\n"
                      for d in deps)
            + "</dependencies></project>\n")


def _resolve(folder: Path, pom: str, what: str, tools: tuple[str, ...]) -> str:
    """The classpath of `pom`'s dependencies, resolved once with Maven into `folder` (again
    when the POM changes or a jar is gone)."""
    def need(tool: str) -> None:
        if shutil.which(tool) is None:
            raise BrokerUnavailable(f"{tool} is not on PATH (Kafka's jars are resolved with mvn "
                                    "and run with java)")

    for tool in tools:
        if tool != "mvn":
            need(tool)
    cp_file, pom_file = folder / "classpath.txt", folder / "pom.xml"
    if cp_file.exists() and pom_file.exists() and pom_file.read_text() == pom:
        cp = cp_file.read_text().strip()
        if all(Path(p).exists() for p in cp.split(os.pathsep)):
            return cp
    if "mvn" in tools:
        need("mvn")
    folder.mkdir(parents=True, exist_ok=True)
    pom_file.write_text(pom)
    tmp = folder / f"classpath.{os.getpid()}.tmp"
    run = subprocess.run(["mvn", "-q", "-B", "dependency:build-classpath",
                          f"-Dmdep.outputFile={tmp}"], cwd=folder, capture_output=True,
                         text=True, timeout=600)
    if run.returncode != 0 or not tmp.exists():
        raise BrokerUnavailable(f"mvn could not resolve {what}:\n"
                                f"{run.stdout[-2000:]}{run.stderr[-2000:]}")
    os.replace(tmp, cp_file)
    return cp_file.read_text().strip()


def classpath(version: str = DEFAULT_VERSION, *, tools: tuple[str, ...] = ("java", "mvn")) -> str:
    """The broker's classpath (kafka_2.13 and its dependencies), resolved once with Maven;
    `tools` are those the caller needs on PATH (reading the jars needs no java)."""
    return _resolve(CACHE / f"kafka-{version}", _pom("kafka_2.13", version),
                    f"kafka_2.13:{version}", tools)


def tiered_storage_classpath(version: str = DEFAULT_VERSION) -> str:
    """The jar of Kafka's own LocalTieredStorage (the RemoteStorageManager Kafka tests tiered
    storage with: the `kafka-storage` test jar on Maven Central), for
    `remote.log.storage.manager.class.path`: that jar alone, as the broker loads it child-first
    and its dependencies are the broker's own (a second copy of the RemoteStorageManager
    interface would not be the broker's)."""
    cp = _resolve(CACHE / f"kafka-storage-test-{version}", _pom("kafka-storage", version, classifier="test"),
                  f"kafka-storage:{version}:test", ("mvn",))
    return next(p for p in cp.split(os.pathsep) if Path(p).name == f"kafka-storage-{version}-test.jar")


def client_classpath(version: str) -> str:
    """Kafka's Java client alone (kafka-clients <version> and its dependencies), any version
    on Maven Central: 4.x, or 0.10.2.2 (the oldest consumer `serve` answers)."""
    # before 2.0 SCRAM encodes with javax.xml.bind.DatatypeConverter, gone from the JDK since 11
    extra = (("javax.xml.bind", "jaxb-api", "2.3.1"),) if int(version.split(".")[0]) < 2 else ()
    return _resolve(CACHE / f"kafka-clients-{version}", _pom("kafka-clients", version, extra),
                    f"kafka-clients:{version}", ("java", "javac", "mvn"))


def properties_text(settings: dict[str, Any]) -> str:
    """`settings` as a .properties file that java.util.Properties.load reads back unchanged:
    ISO-8859-1, other characters as \\uXXXX (UTF-16 units), backslashes, line ends, a
    leading blank or comment sign, and a key's separators escaped."""
    def escape(text: str, key: bool) -> str:
        out = []
        for i, ch in enumerate(text):
            if ch in "\\\n\r\t\f":
                out.append({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[ch])
            elif (key and ch in "=: ") or (i == 0 and ch in " #!"):
                out.append("\\" + ch)
            elif " " <= ch <= "~":
                out.append(ch)
            else:
                units = ch.encode("utf-16-be")
                out.extend(f"\\u{units[j:j + 2].hex()}" for j in range(0, len(units), 2))
        return "".join(out)

    return "".join(f"{escape(k, True)}={escape(str(v), False)}\n" for k, v in settings.items())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    # Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding; as Kafka's
    # Uuid.randomUuid(), never one starting with "-" (kafka-storage's -t would read it as an option)
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


# --- TLS and SASL ------------------------------------------------------------------------------
# Users of the SASL_SSL listener, by mechanism: (name, password). SCRAM users are made by
# kafka-storage format --add-scram, each for its mechanism only (alice cannot log in with
# SCRAM-SHA-512: a client that sends the wrong mechanism fails); PLAIN's are in the listener's
# JAAS config.
USERS = {"SCRAM-SHA-256": ("alice", "alice-secret"), "SCRAM-SHA-512": ("carol", "carol-secret"),
         "PLAIN": ("bob", "bob-secret")}
STORE_PASSWORD = "kafkacodec-store"    # of the JKS stores made for Java clients without PEM support
# the subjects of the client certificates, as Kafka's default principal builder names them
CLIENT_PRINCIPAL = "CN=kafkacodec-client,OU=clients,O=kafkacodec tests"
STRANGER_PRINCIPAL = "CN=stranger,OU=clients,O=elsewhere"
_JAAS = {"SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
         "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
         "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule"}


@dataclass(frozen=True)
class KeyPair:
    """A certificate (PEM, with its chain up to but not including the CA), its private key
    (unencrypted PKCS#8 PEM) and both in one file: Kafka's file PEM keystore (KIP-651)."""
    cert: Path
    key: Path
    keystore: Path


@dataclass(frozen=True)
class SecurityFiles:
    """Certificates (trustme) and users for a secured broker, in `folder`:

    - `ca`: the CA that signed `server` (127.0.0.1 and localhost) and `client`;
    - `server`: the broker's key pair (a test server such as `kafkacodec serve` may use it too);
    - `client`: a client certificate the broker accepts (subject `CLIENT_PRINCIPAL`);
    - `stranger`: a client certificate from another CA: the broker refuses it;
    - `other_ca`: a CA that did not sign `server`: a client trusting only it refuses the broker;
    - `users`: `USERS`.
    """
    folder: Path
    ca: Path
    server: KeyPair
    client: KeyPair
    stranger: KeyPair
    other_ca: Path
    users: dict[str, tuple[str, str]]

    @classmethod
    def create(cls, folder: Path) -> SecurityFiles:
        import trustme

        folder.mkdir(parents=True, exist_ok=True)
        ca, other = trustme.CA(), trustme.CA(organization_name="elsewhere")
        ca.cert_pem.write_to_path(str(folder / "ca.pem"))
        other.cert_pem.write_to_path(str(folder / "other-ca.pem"))
        server = ca.issue_cert("127.0.0.1", "localhost", common_name="localhost",
                               organization_name="kafkacodec tests", organization_unit_name="broker")
        client = ca.issue_cert("client.kafkacodec.test", common_name="kafkacodec-client",
                               organization_name="kafkacodec tests", organization_unit_name="clients")
        stranger = other.issue_cert("stranger.kafkacodec.test", common_name="stranger",
                                    organization_name="elsewhere", organization_unit_name="clients")
        return cls(folder, folder / "ca.pem", _write_pair(server, folder / "server"),
                   _write_pair(client, folder / "client"), _write_pair(stranger, folder / "stranger"),
                   folder / "other-ca.pem", dict(USERS))

    # --- stores for Java clients that read no PEM (kafka-clients before 2.7) -------------------
    def java_truststore(self) -> Path:
        """`ca` in a JKS truststore (password STORE_PASSWORD), made with the JDK's keytool."""
        path = self.folder / "truststore.jks"
        if not path.exists():
            _keytool("-importcert", "-noprompt", "-alias", "kafkacodec-ca", "-file", str(self.ca),
                     "-keystore", str(path), "-storetype", "JKS", "-storepass", STORE_PASSWORD)
        return path

    def java_keystore(self, pair: KeyPair) -> Path:
        """`pair`'s key and chain in a JKS keystore (store and key password STORE_PASSWORD):
        PKCS#12 written with cryptography, converted by keytool."""
        path = pair.keystore.with_suffix(".jks")
        if not path.exists():
            from cryptography import x509
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.serialization import pkcs12

            key = serialization.load_pem_private_key(pair.key.read_bytes(), None)
            chain = x509.load_pem_x509_certificates(pair.cert.read_bytes())
            p12 = path.with_suffix(".p12")
            p12.write_bytes(pkcs12.serialize_key_and_certificates(
                b"kafkacodec", key, chain[0], chain[1:],  # type: ignore[arg-type]
                serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
            _keytool("-importkeystore", "-noprompt", "-srckeystore", str(p12), "-srcstoretype", "PKCS12",
                     "-srcstorepass", STORE_PASSWORD, "-destkeystore", str(path), "-deststoretype", "JKS",
                     "-deststorepass", STORE_PASSWORD, "-destkeypass", STORE_PASSWORD)
        return path

    # --- client settings -------------------------------------------------------------------------
    def _choose(self, protocol: str, mechanism: str | None, user: str | None, password: str | None,
                cert: KeyPair | None | bool) -> tuple[str | None, str | None, KeyPair | None]:
        if protocol not in ("SSL", "SASL_SSL", "SASL_PLAINTEXT", "PLAINTEXT"):
            raise ValueError(f"security protocol {protocol!r}")
        sasl = protocol.startswith("SASL")
        if sasl != (mechanism is not None):
            raise ValueError(f"{protocol} takes {'a' if sasl else 'no'} SASL mechanism")
        if mechanism is not None:
            known_user, known_password = self.users[mechanism]
            user = known_user if user is None else user
            password = known_password if password is None else password
        if cert is True or (cert is None and protocol == "SSL"):
            cert = self.client                      # the SSL listener requires one
        return user, password, cert or None

    def librdkafka(self, bootstrap: str, protocol: str, mechanism: str | None = None, *,
                   user: str | None = None, password: str | None = None,
                   cert: KeyPair | None | bool = None, ca: Path | None = None) -> dict[str, str]:
        """confluent-kafka's settings: `mechanism`'s user from `users` unless `user`/`password`
        say otherwise; `cert` the client's key pair (default: `client` over SSL, none over
        SASL_SSL; True: `client`), `ca` the CA file trusted (default `ca`)."""
        user, password, pair = self._choose(protocol, mechanism, user, password, cert)
        conf = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
        if protocol.endswith("SSL"):
            conf["ssl.ca.location"] = str(ca or self.ca)
            conf["ssl.endpoint.identification.algorithm"] = "https"
        if pair is not None:
            conf["ssl.certificate.location"] = str(pair.cert)
            conf["ssl.key.location"] = str(pair.key)
        if mechanism is not None:
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user or "",
                         "sasl.password": password or ""})
        return conf

    def java(self, protocol: str, mechanism: str | None = None, *, user: str | None = None,
             password: str | None = None, cert: KeyPair | None | bool = None, ca: Path | None = None,
             jks: bool = False) -> dict[str, str]:
        """Kafka's Java client settings (also what kafkacodec's ClientSecurity reads), the
        bootstrap aside: PEM stores (kafka-clients 2.7+), or JKS ones with `jks` (0.10.2...)."""
        user, password, pair = self._choose(protocol, mechanism, user, password, cert)
        conf = {"security.protocol": protocol}
        if protocol.endswith("SSL"):
            if jks:
                if ca is not None:
                    raise ValueError("jks: the truststore holds `ca` only")
                conf.update({"ssl.truststore.location": str(self.java_truststore()),
                             "ssl.truststore.password": STORE_PASSWORD, "ssl.truststore.type": "JKS"})
            else:
                conf.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca or self.ca)})
            conf["ssl.endpoint.identification.algorithm"] = "https"
        if pair is not None:
            if jks:
                conf.update({"ssl.keystore.location": str(self.java_keystore(pair)), "ssl.keystore.type": "JKS",
                             "ssl.keystore.password": STORE_PASSWORD, "ssl.key.password": STORE_PASSWORD})
            else:
                conf.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pair.keystore)})
        if mechanism is not None:
            conf["sasl.mechanism"] = mechanism
            conf["sasl.jaas.config"] = jaas_config(mechanism, user or "", password or "")
        return conf

    def kafka_python(self, bootstrap: str, protocol: str, mechanism: str | None = None, *,
                     user: str | None = None, password: str | None = None,
                     cert: KeyPair | None | bool = None, ca: Path | None = None) -> dict[str, object]:
        """kafka-python's keyword arguments (its consumer, producer and admin client)."""
        user, password, pair = self._choose(protocol, mechanism, user, password, cert)
        conf: dict[str, object] = {"bootstrap_servers": bootstrap, "security_protocol": protocol}
        if protocol.endswith("SSL"):
            conf["ssl_cafile"] = str(ca or self.ca)
        if pair is not None:
            conf.update({"ssl_certfile": str(pair.cert), "ssl_keyfile": str(pair.key)})
        if mechanism is not None:
            conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                         "sasl_plain_password": password})
        return conf

    def aiokafka(self, bootstrap: str, protocol: str, mechanism: str | None = None,
                 **choice: Any) -> dict[str, object]:
        """aiokafka's keyword arguments: kafka-python's, with TLS as the ssl.SSLContext aiokafka
        requires (`choice` as for `librdkafka`)."""
        import ssl

        conf = self.kafka_python(bootstrap, protocol, mechanism, **choice)
        cafile, certfile, keyfile = (conf.pop(key, None) for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"))
        if cafile is not None:
            context = ssl.create_default_context(cafile=str(cafile))
            if certfile is not None:
                context.load_cert_chain(str(certfile), str(keyfile))
            conf["ssl_context"] = context
        return conf

    # --- the broker's side -----------------------------------------------------------------------
    def broker_properties(self) -> dict[str, str]:
        """The broker's TLS and SASL settings (server.properties), listeners aside: one PEM
        keystore and truststore for every TLS listener, client certificates required on the
        listener named SSL, the mechanisms of `users` on the one named SASL_SSL."""
        props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.server.keystore),
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca),
                 "listener.name.ssl.ssl.client.auth": "required",
                 "sasl.enabled.mechanisms": ",".join(self.users)}
        plain = "".join(f' user_{name}="{secret}"' for mech, (name, secret) in self.users.items()
                        if mech == "PLAIN")
        for mechanism in self.users:
            props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = (
                f"{_JAAS[mechanism]} required{plain if mechanism == 'PLAIN' else ''};")
        return props

    def kafkacodec_users_file(self) -> Path:
        """The same users for `kafkacodec serve` (its kafkacodec.users.file), made on first use."""
        from kafkacodec.net.users import UsersFile

        path = self.folder / "users.file"
        if not path.exists():
            users = UsersFile()
            for mechanism, (name, secret) in self.users.items():
                users.set_password(name, mechanism, secret)
            users.save(path)
        return path

    def scram_arguments(self) -> list[str]:
        """kafka-storage format's --add-scram arguments: the SCRAM users, in the metadata log
        from the start."""
        return [arg for mech, (name, secret) in self.users.items() if mech.startswith("SCRAM-")
                for arg in ("--add-scram", f"{mech}=[name={name},password={secret}]")]


def jaas_config(mechanism: str, user: str, password: str) -> str:
    """A Java client's sasl.jaas.config for `mechanism` (KIP-85; quotes in the values escaped as
    Kafka's JaasConfig parser reads them)."""
    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{_JAAS[mechanism]} required username={quoted(user)} password={quoted(password)};"


def _write_pair(cert: Any, stem: Path) -> KeyPair:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)
    pair = KeyPair(stem.with_suffix(".pem"), stem.with_suffix(".key"), stem.with_suffix(".keystore.pem"))
    pair.cert.write_bytes(chain)
    pair.key.write_bytes(key_pem)
    pair.keystore.write_bytes(key_pem + chain)
    return pair


def _keytool(*args: str) -> None:
    if shutil.which("keytool") is None:
        raise BrokerUnavailable("keytool (the JDK's) is not on PATH: it makes the JKS stores")
    run = subprocess.run(["keytool", *args], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise BrokerUnavailable(f"keytool {args[0]} failed: {run.stdout}{run.stderr}")


class KafkaBroker:
    """One running broker; `stop()` (or leaving the `with` block) kills it and removes its
    data directory."""

    def __init__(self, version: str, listeners: dict[str, int], workdir: Path,
                 process: subprocess.Popen[bytes], security: SecurityFiles | None = None):
        self.version = version
        self.listeners = listeners         # listener name (= its security protocol) -> port
        self.port = listeners["PLAINTEXT"]
        self.workdir = workdir
        self.process = process
        self.security = security

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """The address of the listener PLAINTEXT, SSL (client certificate required) or SASL_SSL
        (the last two with `security`)."""
        return f"127.0.0.1:{self.listeners[listener]}"

    @property
    def log_dir(self) -> Path:
        """The broker's log.dirs: `<topic>-<partition>/<base offset>.log` segments."""
        return self.workdir / "data"

    @property
    def remote_dir(self) -> Path:
        """Where LocalTieredStorage keeps remote segments (a broker started with `tiered`)."""
        return self.workdir / "remote" / "kafka-tiered-storage"

    @classmethod
    def start(cls, version: str = DEFAULT_VERSION, properties: dict[str, Any] | None = None,
              timeout: float = 90.0, security: SecurityFiles | None = None,
              oauthbearer: bool = False, tiered: bool = False) -> KafkaBroker:
        """With `tiered`, tiered storage (KIP-405) on: Kafka's LocalTieredStorage keeps the remote
        segments of topics created with `remote.storage.enable=true` under `remote_dir`
        (`kafka-tiered-storage/<topic>-<partition>-<topic id>/<base offset>-<segment id>.log`
        and its index and snapshot files), the topic-based metadata manager their metadata in
        `__remote_log_metadata`; the remote log manager runs every 0.5 s.  With `security`,
        listeners SASL_SSL and SSL besides PLAINTEXT (which the broker itself and the controller
        keep using), set up by `security.broker_properties()`.  With
        `oauthbearer`, a SASL_PLAINTEXT listener of OAUTHBEARER with Kafka's unsecured tokens
        (OAuthBearerUnsecuredValidatorCallbackHandler: an unsigned JWT with `sub` and `exp`)."""
        # Its ports are picked free and then bound by the JVM seconds later: another test process
        # may take one meanwhile (three xdist workers start brokers).  A broker that exits while
        # starting is started again on fresh ports, twice at most.
        for attempt in range(3):
            try:
                return cls._start_once(version, properties, timeout, security, oauthbearer, tiered)
            except BrokerExited:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _start_once(cls, version: str, properties: dict[str, Any] | None, timeout: float,
                    security: SecurityFiles | None, oauthbearer: bool, tiered: bool) -> KafkaBroker:
        cp = classpath(version)
        workdir = Path(tempfile.mkdtemp(prefix=f"kafka-{version}-"))
        remote = {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
            "remote.log.storage.manager.class.path": tiered_storage_classpath(version),
            "remote.log.storage.manager.impl.prefix": "rsm.config.",
            "rsm.config.dir": str(workdir / "remote"),
            "rsm.config.delete.on.close": "false",
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": 1,
            "rlmm.config.remote.log.metadata.topic.num.partitions": 1,
            "remote.log.manager.task.interval.ms": 500,
            "log.retention.check.interval.ms": 500,     # local retention deletes tiered segments soon
            "log.segment.delete.delay.ms": 1000,
        } if tiered else {}
        names = ["PLAINTEXT", "SASL_SSL", "SSL"] if security else ["PLAINTEXT"]
        if oauthbearer:
            names.append("SASL_PLAINTEXT")
        listeners = {name: _free_port() for name in names}
        controller = _free_port()
        advertised = ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items())
        props = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"{advertised},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": ",".join(f"{name}:{name}" for name in names)
                                              + ",CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(workdir / "data"),
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0,
            "num.partitions": 1,
            "auto.create.topics.enable": "false",
            # tests write records stamped years ago (fixed timestamps): time retention would
            # delete them between a write and the check (7 days by default)
            "log.retention.ms": -1,
            # the log cleaner looks for work every second (15 s by default), so a test can wait
            # for a compacted topic to be cleaned (tests/test_partition_log_agree.py)
            "log.cleaner.backoff.ms": 1000,
            # a KRaft snapshot (__cluster_metadata-0/*.checkpoint) every 5 s instead of every hour,
            # for tests that read one (test_dump_kafka); each is a few KB written once
            "metadata.log.max.snapshot.interval.ms": 5000,
            **remote,
            **(security.broker_properties() if security else {}),
            **({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                    'unsecuredLoginStringClaim_sub="broker";'} if oauthbearer else {}),
            **(properties or {}),
        }
        config = workdir / "server.properties"
        config.write_text(properties_text(props), encoding="latin-1")
        java = ["java", "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-cp", cp,
                "-Dorg.slf4j.simpleLogger.showDateTime=true"]
        fmt = subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                                     "-c", str(config), *(security.scram_arguments() if security else [])],
                             capture_output=True, text=True, timeout=120)
        if fmt.returncode != 0:
            shutil.rmtree(workdir, ignore_errors=True)
            raise BrokerUnavailable(f"kafka-storage format failed: {fmt.stdout}{fmt.stderr}")
        log = open(workdir / "broker.log", "wb")
        process = subprocess.Popen(java + ["kafka.Kafka", str(config)], stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        broker = cls(version, listeners, workdir, process, security)
        try:
            broker._wait_ready(timeout)
        except BaseException:
            broker.stop()
            raise
        return broker

    def _wait_ready(self, timeout: float) -> None:
        """Ready when a Metadata request through confluent-kafka lists this broker."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        # librdkafka's "Connection refused" until the broker listens: through logging, not stderr
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000,
                                "logger": logging.getLogger("librdkafka")}
        admin = AdminClient(conf)
        while True:
            if self.process.poll() is not None:
                raise BrokerExited(f"Kafka {self.version} exited with {self.process.returncode}:\n"
                                   f"{self.log_errors()}\n...\n{self.log_tail()}")
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"Kafka {self.version} not ready after {timeout} s:\n"
                                        f"{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return (self.workdir / "broker.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def log_errors(self, n: int = 4000) -> str:
        """The log's ERROR lines and exceptions (the cause; the tail shows only the shutdown)."""
        lines = [line for line in self.log_tail(1 << 20).splitlines()
                 if " ERROR " in line or "Exception" in line or "Error:" in line]
        return "\n".join(lines)[:n]

    def log_mark(self) -> int:
        """Where the broker's log ends now, for `log_since`."""
        try:
            return (self.workdir / "broker.log").stat().st_size
        except OSError:
            return 0

    def log_since(self, mark: int) -> str:
        """What the broker logged (slf4j-simple, INFO and up) after `log_mark()` said `mark`."""
        try:
            with open(self.workdir / "broker.log", "rb") as log:
                log.seek(mark)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                     timeout: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                      operation_timeout=timeout)
        for future in futures.values():
            future.result(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=DEFAULT_VERSION)
    parser.add_argument("--secured", action="store_true",
                        help="also SASL_SSL and SSL listeners (certificates in a temporary folder)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kafka-tls-")) if args.secured else None
    try:
        with KafkaBroker.start(args.version,
                               security=SecurityFiles.create(folder) if folder else None) as running:
            print(f"bootstrap {running.bootstrap}", flush=True)
            if folder is not None:
                for name in running.listeners:
                    print(f"listener {name} {running.bootstrap_of(name)}")
                print(f"certificates {folder}", flush=True)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            try:
                running.process.wait()
            except KeyboardInterrupt:
                pass
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
