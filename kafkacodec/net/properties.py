"""Security settings, read as Kafka's tools and librdkafka read them.

Java ``.properties`` files: `load_properties(path)` reads one as ``java.util.Properties.load``
does from a stream, which is how Kafka's tools read ``--command-config`` and ``server.properties``:
ISO-8859-1 text (other characters as ``\\uXXXX``); ``key=value``, ``key: value`` or ``key value``;
lines whose first non-blank character is ``#`` or ``!`` are comments; a line ending in an odd
number of backslashes continues on the next (whose leading blanks are dropped); blanks (space,
tab, form feed) around the separator and at the start of a line are dropped, trailing ones kept;
``\\t \\n \\r \\f \\uXXXX`` and backslash-anything escapes; the last of repeated keys wins.
`parse_properties(text)` does the same on a str.

Typed settings, the names Kafka's and librdkafka's own:

- `ClientSecurity.from_properties(props)`: how a client (the consumer core, the mirror, the
  gateway's upstream) connects -- `security.protocol`, TLS (librdkafka's `ssl.ca.location`,
  `ssl.certificate.location`, `ssl.key.location`; Java's PEM `ssl.truststore.location` /
  `ssl.keystore.location`, KIP-651), SASL (`sasl.mechanism` or librdkafka's
  `sasl.mechanisms`, `sasl.username`/`sasl.password` or Java's `sasl.jaas.config`, OAUTHBEARER
  tokens).
- `BrokerSecurity.from_properties(props)`: what `kafkacodec serve` accepts -- `listeners`,
  `listener.security.protocol.map`, the PEM keystore and truststore, `ssl.client.auth`,
  `sasl.enabled.mechanisms`, per-listener overrides ``listener.name.<name>.<setting>``,
  `connection.failed.authentication.delay.ms`, `connections.max.reauth.ms`, and kafkacodec's
  `kafkacodec.users.file` and `kafkacodec.acl.file`.

docs/security.md has every setting, its default and where kafkacodec differs from Kafka.

Rules both follow:

- Values are trimmed as Kafka's ConfigDef trims them.  ``${env:NAME}`` anywhere in a value
  read here is replaced by the environment variable NAME -- Kafka's EnvVarConfigProvider
  syntax, always on (Kafka needs ``config.providers=env`` and
  ``config.providers.env.class=...EnvVarConfigProvider`` for it; those lines are accepted and
  not needed).  An unset variable is an error (Kafka would leave the text as it is); Kafka's
  ``${file:...}`` and ``${directory:...}`` providers are refused with a clear error.
- Other keys are kept, untouched, in ``.other`` (a file shared with other tools), except a key
  that looks like a misspelling of one read here, which is an error with "did you mean".
  Kafka's and librdkafka's other security settings are known: those that change nothing here
  (tuning, Kerberos options while GSSAPI is not used) are kept, those whose meaning kafkacodec
  cannot honour (``ssl.cipher.suites``, JKS or PKCS#12 stores, OIDC token endpoints...) are
  refused rather than silently ignored.
- Secrets (passwords, tokens, the JAAS config) are held as `Secret`: repr() and every error
  message name the key, never the value.
"""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Union

from kafkacodec.net._secret import Secret
from kafkacodec.net.sasl import (CLIENT_MECHANISMS, SERVER_MECHANISMS, OAuthBearerToken, TokenCallback,
                                 unsecured_jwt)

__all__ = ["parse_properties", "load_properties", "expand_env", "parse_jaas_config", "JaasModule",
           "ClientSecurity", "BrokerSecurity", "Listener", "ServerSsl", "SECURITY_PROTOCOLS",
           "TLS_PROTOCOLS", "SSL_CLIENT_AUTH"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")           # ssl.enabled.protocols kafkacodec accepts
SSL_CLIENT_AUTH = ("none", "requested", "required")

PathLike = Union[str, "os.PathLike[str]"]


# --- java.util.Properties ---------------------------------------------------------------------

_BLANKS = " \t\f"                      # Properties' whitespace (line ends are split first)
_LINE_END = re.compile(r"(\r\n|\r|\n)")


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """The key/value pairs of a ``.properties`` text, by java.util.Properties.load's rules (see
    the module docstring).  A malformed ``\\uXXXX`` raises ValueError naming `source` and the
    line."""
    parts = _LINE_END.split(text)
    lines, ends = parts[::2], parts[1::2] + [""]     # each natural line and its line end
    result: dict[str, str] = {}
    i = 0
    while i < len(lines):
        logical, first, at_end = "", 0, False
        while i < len(lines):          # one logical line: natural lines joined at odd backslashes
            line = lines[i].lstrip(_BLANKS)
            i += 1
            if not logical:            # the start of a logical line: blank and comment lines skipped
                if not line or line[0] in "#!":
                    continue
                first = i
            backslashes = len(line) - len(line.rstrip("\\"))
            if backslashes % 2 == 0:
                logical += line
                break
            logical += line[:-1]       # the continuation backslash is dropped
            # the text ends right after it (or after a one-character line end): Java's
            # LineReader returns the line, even an empty one
            at_end = i >= len(lines) or (i == len(lines) - 1 and not lines[i] and ends[i - 1] != "\r\n")
            if at_end:
                break
        if not logical and not at_end:
            continue
        key, value = _split_key(logical)
        where = f"{source}:{first}"
        result[_unescape(key, where)] = _unescape(value, where)
    return result


def _split_key(line: str) -> tuple[str, str]:
    """Properties.load's split: the key ends at the first unescaped '=', ':' or blank; then
    blanks, at most one '=' or ':', and blanks are skipped."""
    n = len(line)
    k = 0
    while k < n:
        c = line[k]
        if c == "\\":
            k += 2
            continue
        if c in "=:" or c in _BLANKS:
            break
        k += 1
    key = line[:k]
    v = k
    if v < n and line[v] in _BLANKS:
        while v < n and line[v] in _BLANKS:
            v += 1
        if v < n and line[v] in "=:":
            v += 1
    elif v < n:
        v += 1                         # the '=' or ':' itself
    while v < n and line[v] in _BLANKS:
        v += 1
    return key, line[v:]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        c = text[i] if i < n else ""
        i += 1
        if c == "u":
            digits = text[i:i + 4]
            if len(digits) < 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"{where}: malformed \\uXXXX escape (four hexadecimal digits needed)")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    result = "".join(out)
    if any("\ud800" <= ch <= "\udfff" for ch in result):
        # \\uD83D\\uDE00 is one character (UTF-16 pairs, as in Java); a lone half stays as it is
        result = result.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return result


def load_properties(path: PathLike) -> dict[str, str]:
    """Read a ``.properties`` file as Kafka's tools do (Properties.load(InputStream): the bytes
    as ISO-8859-1)."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_properties(data.decode("latin-1"), source=os.fspath(path))


# --- values ------------------------------------------------------------------------------------

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}
_VARIABLE = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")
# String.trim(): every character up to U+0020
_TRIM = "".join(chr(c) for c in range(33))


def expand_env(value: str, *, key: str, environ: Mapping[str, str] | None = None) -> str:
    """`value` with each ``${env:NAME}`` replaced by the environment variable NAME (`environ`,
    default os.environ).  An unset NAME, or a ``${file:...}``/``${directory:...}`` reference,
    raises ValueError naming `key` and the variable, never the value."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        provider, path, name = match.group(1), match.group(2), match.group(3)
        if provider == "env" and path is None:
            if name not in env:
                raise ValueError(f"{key}: the environment variable {name} (${{env:{name}}}) is not set")
            return env[name]
        if provider in ("file", "directory"):
            raise ValueError(f"{key}: Kafka's {provider} config provider is not supported; use "
                             "${env:NAME} (docs/security.md)")
        return match.group(0)

    return _VARIABLE.sub(replace, value)


class _Settings:
    """The settings one object reads: values expanded and trimmed on the way, the keys that
    were read remembered (so the rest can be checked for misspellings)."""

    def __init__(self, props: Mapping[str, str], secret_keys: frozenset[str],
                 environ: Mapping[str, str] | None) -> None:
        self.props = props
        self.secret_keys = secret_keys
        self.environ = environ

    def get(self, key: str, default: str | None = None) -> str | None:
        raw = self.props.get(key)
        if raw is None:
            return default
        return expand_env(str(raw), key=key, environ=self.environ).strip(_TRIM)

    def secret(self, key: str) -> Secret | None:
        value = self.get(key)
        return None if value is None else Secret(value)

    def shown(self, key: str, value: str) -> str:
        """How a value appears in a message: secrets never."""
        return "(hidden)" if key in self.secret_keys else repr(value)

    def choice(self, key: str, choices: tuple[str, ...], default: str, *, upper: bool = False,
               lower: bool = False) -> str:
        value = self.get(key)
        if value is None or value == "":
            return default
        normal = value.upper() if upper else value.lower() if lower else value
        if normal not in choices:
            raise ValueError(f"{key}={self.shown(key, value)} is not one of {', '.join(choices)}")
        return normal

    def integer(self, key: str, default: int, *, least: int = 0) -> int:
        value = self.get(key)
        if value is None or value == "":
            return default
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{key}={value!r} is not a whole number") from None
        if number < least:
            raise ValueError(f"{key}={number} must be at least {least}")
        return number

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None or value == "":
            return default
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{key}={value!r} is not true or false")
        return value.lower() == "true"

    def items(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """A Kafka LIST: comma-separated, each item trimmed, empty items dropped."""
        value = self.get(key)
        if value is None:
            return default
        return tuple(item.strip(_TRIM) for item in value.split(",") if item.strip(_TRIM))

    def path(self, key: str) -> str | None:
        value = self.get(key)
        return value or None


def _check_keys(props: Mapping[str, str], known: frozenset[str], recognised: frozenset[str], *,
                tls: bool, sasl: bool, check: Mapping[str, str] | None = None) -> dict[str, str]:
    """The keys nobody here reads (kept for other tools), after refusing the settings kafkacodec
    cannot honour (`_REFUSED`: ssl.* ones when TLS is used, sasl.* ones when SASL is) and the
    likely misspellings of the ones it reads.  `check` maps a key to the name to check (a
    listener-prefixed key to its unprefixed form)."""
    other: dict[str, str] = {}
    for key, value in props.items():
        name = (check or {}).get(key, key)
        if name in known:
            continue
        used = tls if name.startswith("ssl.") else sasl if name.startswith("sasl.") else True
        default_rules = name == "ssl.principal.mapping.rules" and str(value).strip(_TRIM) == "DEFAULT"
        if name in _REFUSED and used and not default_rules:
            raise ValueError(f"{key}: {_REFUSED[name]}")
        if name not in recognised and name not in _REFUSED:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
            if close:
                raise ValueError(f"unknown setting {key!r}: did you mean {close[0]!r}?")
        other[key] = value
    return other


# --- JAAS (sasl.jaas.config) -------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class JaasModule:
    """One login module of a JAAS config: its class, control flag and options (values are
    secrets as a whole: repr() shows the option names only)."""

    login_module: str
    control_flag: str
    options: Mapping[str, str]

    def __repr__(self) -> str:
        return f"JaasModule({self.login_module} {self.control_flag}, options={sorted(self.options)})"


def _jaas_tokens(text: str) -> list[tuple[str, str]]:
    """Kafka's JaasConfig tokenizer (java.io.StreamTokenizer with its syntax): ("word", s),
    ("quoted", s), or (";" / "=", c).  Characters up to space are blanks; '/' starts a comment
    (``//``, ``/* */`` or a lone ``/`` to the end of the line); quotes ``"`` and ``'`` end at
    the same quote or the end of the line, with StreamTokenizer's escapes."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                i = n if end < 0 else end + 2
            else:
                while i < n and text[i] not in "\r\n":
                    i += 1
        elif c in ";=":
            tokens.append((c, c))
            i += 1
        elif c in "\"'":
            i, value = _jaas_quoted(text, i + 1, c)
            tokens.append(("quoted", value))
        elif 129 <= ord(c) <= 159:
            raise ValueError(f"sasl.jaas.config: unexpected control character U+{ord(c):04X}")
        else:
            start = i
            while i < n and text[i] > " " and text[i] not in "/;=\"'" and not 129 <= ord(text[i]) <= 159:
                i += 1
            tokens.append(("word", text[start:i]))
    return tokens


_JAAS_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _jaas_quoted(text: str, i: int, quote: str) -> tuple[int, str]:
    out: list[str] = []
    n = len(text)
    while i < n and text[i] != quote and text[i] not in "\r\n":
        c = text[i]
        i += 1
        if c == "\\" and i < n:
            c = text[i]
            i += 1
            if "0" <= c <= "7":            # octal, StreamTokenizer's: up to 3 digits, at most \377
                digits = c
                limit = 3 if c <= "3" else 2
                while len(digits) < limit and i < n and "0" <= text[i] <= "7":
                    digits += text[i]
                    i += 1
                c = chr(int(digits, 8))
            else:
                c = _JAAS_ESCAPES.get(c, c)
        out.append(c)
    if i < n and text[i] == quote:
        i += 1
    return i, "".join(out)


def parse_jaas_config(text: str) -> list[JaasModule]:
    """The login modules of a ``sasl.jaas.config`` value, ``<LoginModuleClass> <controlFlag>
    (<option>=<value>)*;`` each, as Kafka's JaasConfig parses them.  Errors name the option,
    never a value."""
    tokens = _jaas_tokens(text)
    modules: list[JaasModule] = []
    i = 0
    while i < len(tokens):
        kind, login_module = tokens[i]
        if kind not in ("word", "quoted"):
            raise ValueError(f"sasl.jaas.config: a login module class expected, found {login_module!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] not in ("word", "quoted"):
            raise ValueError("sasl.jaas.config: login module control flag not specified")
        flag = tokens[i + 1][1].lower()
        if flag not in ("required", "requisite", "sufficient", "optional"):
            raise ValueError(f"sasl.jaas.config: invalid login module control flag {tokens[i + 1][1]!r}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            kind, key = tokens[i]
            if kind not in ("word", "quoted"):
                raise ValueError(f"sasl.jaas.config: an option name expected, found {key!r}")
            if i + 2 >= len(tokens) or tokens[i + 1][0] != "=" or tokens[i + 2][0] not in ("word", "quoted"):
                raise ValueError(f"sasl.jaas.config: value not specified for option {key!r}")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError("sasl.jaas.config: the login module is not terminated by ';'")
        i += 1
        modules.append(JaasModule(login_module, flag, MappingProxyType(options)))
    if not modules:
        raise ValueError("sasl.jaas.config: no login module")
    return modules


_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


# --- OAUTHBEARER's unsecured tokens ------------------------------------------------------------

@dataclass(frozen=True)
class _UnsecuredToken:
    """A token source that makes a fresh unsecured JWT at each authentication: librdkafka's
    ``sasl.oauthbearer.config`` (principal=, scope=, lifeSeconds=, extension_NAME=) and Kafka's
    OAuthBearerLoginModule unsecuredLogin* options."""

    principal: str
    principal_claim: str = "sub"
    lifetime_s: int = 3600
    claims: Mapping[str, object] = field(default_factory=dict)
    extensions: Mapping[str, str] = field(default_factory=dict)

    def __call__(self) -> OAuthBearerToken:
        now = int(time.time())
        claims = {**self.claims, "iat": now, "exp": now + self.lifetime_s, self.principal_claim: self.principal}
        return OAuthBearerToken(Secret(unsecured_jwt(claims)), lifetime_ms=(now + self.lifetime_s) * 1000,
                                principal=self.principal, extensions=self.extensions)


def _librdkafka_unsecured(config: str) -> _UnsecuredToken:
    """librdkafka's sasl.oauthbearer.config: space-separated name=value pairs."""
    values: dict[str, str] = {}
    extensions: dict[str, str] = {}
    for pair in config.split():
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"sasl.oauthbearer.config: {name!r} is not name=value")
        if name.startswith("extension_"):
            extensions[name[len("extension_"):]] = value
        elif name in ("principal", "principalClaimName", "scope", "scopeClaimName", "lifeSeconds"):
            values[name] = value
        else:
            raise ValueError(f"sasl.oauthbearer.config: unknown name {name!r} (principal, principalClaimName, "
                             "scope, scopeClaimName, lifeSeconds, extension_NAME)")
    if not values.get("principal"):
        raise ValueError("sasl.oauthbearer.config: principal= is required")
    claims: dict[str, object] = {}
    if values.get("scope"):
        claims[values.get("scopeClaimName", "scope")] = [s for s in values["scope"].split(",") if s]
    lifetime = values.get("lifeSeconds", "3600")
    if not lifetime.isdigit() or int(lifetime) <= 0:
        raise ValueError(f"sasl.oauthbearer.config: lifeSeconds={lifetime!r} is not a positive whole number")
    return _UnsecuredToken(values["principal"], values.get("principalClaimName", "sub"), int(lifetime),
                           claims, extensions)


def _java_unsecured(options: Mapping[str, str]) -> _UnsecuredToken:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler options."""
    claims: dict[str, object] = {}
    extensions: dict[str, str] = {}
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600")
    for name, value in options.items():
        if name.startswith("unsecuredLoginStringClaim_"):
            claims[name[len("unsecuredLoginStringClaim_"):]] = value
        elif name.startswith("unsecuredLoginNumberClaim_"):
            try:
                claims[name[len("unsecuredLoginNumberClaim_"):]] = float(value) if "." in value else int(value)
            except ValueError:
                raise ValueError(f"sasl.jaas.config: {name} is not a number") from None
        elif name.startswith("unsecuredLoginListClaim_"):
            # the first character is the separator (Kafka's rule): ",a,b" -> ["a", "b"]
            claims[name[len("unsecuredLoginListClaim_"):]] = [v for v in value[1:].split(value[:1]) if v] \
                if value else []
        elif name.startswith("unsecuredLoginExtension_"):
            extensions[name[len("unsecuredLoginExtension_"):]] = value
        elif name in ("clientId", "clientSecret", "scope"):
            raise ValueError(f"sasl.jaas.config: {name}: OAuth client credentials (OIDC) are not supported; "
                             "pass a token callback or a token (docs/security.md)")
    principal = claims.pop(principal_claim, None)
    if not isinstance(principal, str) or not principal:
        raise ValueError(f"sasl.jaas.config: OAuthBearerLoginModule needs unsecuredLoginStringClaim_{principal_claim} "
                         "(the principal) for an unsecured token")
    if not lifetime.isdigit() or int(lifetime) <= 0:
        raise ValueError("sasl.jaas.config: unsecuredLoginLifetimeSeconds is not a positive whole number")
    return _UnsecuredToken(principal, principal_claim, int(lifetime), claims, extensions)


# --- the client's settings ---------------------------------------------------------------------

_CLIENT_SECRETS = frozenset({"ssl.key.password", "sasl.password", "sasl.jaas.config", "sasl.oauthbearer.token",
                             "ssl.keystore.password", "ssl.truststore.password", "sasl.oauthbearer.client.secret",
                             "ssl.keystore.key", "ssl.key.pem"})
_CLIENT_KEYS = frozenset({
    "security.protocol", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password", "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.certificates", "ssl.keystore.location",
    "ssl.keystore.type", "ssl.enabled.protocols", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "sasl.jaas.config", "sasl.oauthbearer.token", "sasl.oauthbearer.config",
    "enable.sasl.oauthbearer.unsecure.jwt",
})
# Kafka's and librdkafka's security settings whose meaning kafkacodec cannot honour.
_UNSUPPORTED = "is not supported by kafkacodec (docs/security.md)"
_REFUSED = {
    "ssl.cipher.suites": f"choosing cipher suites {_UNSUPPORTED}; TLS 1.2+ with Python's defaults is used",
    "ssl.curves.list": _UNSUPPORTED, "ssl.sigalgs.list": _UNSUPPORTED, "ssl.crl.location": _UNSUPPORTED,
    "ssl.engine.location": _UNSUPPORTED, "ssl.engine.id": _UNSUPPORTED, "ssl.providers": _UNSUPPORTED,
    "ssl.provider": _UNSUPPORTED, "ssl.engine.factory.class": _UNSUPPORTED,
    "ssl.keystore.key": "PEM keys given inline are not supported; put the key and chain in a file "
                        "named by ssl.keystore.location (ssl.keystore.type=PEM)",
    "ssl.keystore.certificate.chain": "PEM chains given inline are not supported; use ssl.keystore.location",
    "ssl.certificate.pem": "inline PEM certificates are not supported; use ssl.certificate.location",
    "ssl.key.pem": "inline PEM keys are not supported; use ssl.key.location",
    "ssl.keystore.password": "a PEM keystore has no store password (Kafka refuses it too); the key's "
                             "password is ssl.key.password",
    "ssl.truststore.password": "a PEM truststore has no password (Kafka refuses it too)",
    "sasl.login.callback.handler.class": "Java callback classes cannot run here; pass a token callback in code",
    "sasl.client.callback.handler.class": "Java callback classes cannot run here",
    "sasl.login.class": "Java login classes cannot run here",
    "sasl.oauthbearer.token.endpoint.url": "OAuth client credentials (OIDC) are not supported; pass a "
                                           "token callback in code or sasl.oauthbearer.token",
    "sasl.oauthbearer.client.id": "OAuth client credentials (OIDC) are not supported",
    "sasl.oauthbearer.client.secret": "OAuth client credentials (OIDC) are not supported",
    "ssl.principal.mapping.rules": "only the DEFAULT principal mapping is supported",
}
# Known to Kafka or librdkafka, without effect here (kept in .other, never suggested against).
_RECOGNISED = frozenset({
    "ssl.protocol", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    "ssl.ca.certificate.stores", "ssl.certificate.verify_cb", "sasl.kerberos.service.name",
    "sasl.kerberos.principal", "sasl.kerberos.kinit.cmd", "sasl.kerberos.keytab",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds", "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms", "sasl.login.retry.backoff.max.ms",
    "sasl.oauthbearer.method", "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name", "sasl.enabled.mechanisms",
    "ssl.client.auth", "config.providers", "config.providers.env.class", "ssl.allow.dn.changes",
    "ssl.allow.san.changes", "security.inter.broker.protocol", "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol", "sasl.server.max.receive.size", "connections.max.reauth.ms",
})


def _pem_store(s: _Settings, kind: str) -> str | None:
    """ssl.<kind>store.location, which kafkacodec reads only as PEM (KIP-651)."""
    location = s.path(f"ssl.{kind}store.location")
    store_type = (s.get(f"ssl.{kind}store.type") or "").upper()
    if location is None:
        return None
    if store_type != "PEM":
        shown = store_type or "not set: Kafka's default JKS (librdkafka reads PKCS#12)"
        raise ValueError(f"ssl.{kind}store.location needs ssl.{kind}store.type=PEM (type {shown}): kafkacodec "
                         f"reads PEM stores only (KIP-651); convert a PKCS#12 one with `openssl pkcs12 -in "
                         f"store.p12 -out store.pem{' -nodes' if kind == 'key' else ' -nokeys'}`")
    return location


def _enabled_protocols(s: _Settings, key: str = "ssl.enabled.protocols") -> tuple[str, ...]:
    protocols = s.items(key, TLS_PROTOCOLS)
    for p in protocols:
        if p not in TLS_PROTOCOLS:
            raise ValueError(f"{key}: {p!r} is refused: kafkacodec speaks {' and '.join(TLS_PROTOCOLS)} only "
                             "(TLS 1.0 and 1.1 are broken and disabled in Kafka since 2.x)")
    if not protocols:
        raise ValueError(f"{key} is empty")
    return protocols


@dataclass(frozen=True, repr=False)
class ClientSecurity:
    """How a client connects: TLS and SASL settings (see the module docstring for the keys).
    Build it with `from_properties`; repr() shows no secret and no value of `other`."""

    security_protocol: str = "PLAINTEXT"
    ssl_ca_location: str | None = None            # a PEM file or a directory of them; None: system CAs
    ssl_ca_pem: str | None = None                 # PEM text of CAs (ssl.ca.pem, ssl.truststore.certificates)
    ssl_certificate_location: str | None = None   # the client's certificate chain (PEM)
    ssl_key_location: str | None = None           # its private key (PEM), if not in the certificate file
    ssl_key_password: Secret | None = None
    ssl_endpoint_identification: bool = True      # check the broker's name against its certificate
    ssl_certificate_verification: bool = True     # librdkafka's enable.ssl.certificate.verification
    ssl_enabled_protocols: tuple[str, ...] = TLS_PROTOCOLS
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    sasl_scram_tokenauth: bool = False            # ScramLoginModule tokenauth=true (delegation tokens)
    sasl_oauthbearer_token: Secret | None = None
    sasl_oauthbearer_callback: TokenCallback | None = field(default=None, compare=False)
    sasl_oauthbearer_extensions: Mapping[str, str] = field(default_factory=dict)
    other: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def oauthbearer_token_source(self) -> OAuthBearerToken | Secret | TokenCallback:
        """What an OAUTHBEARER client gets its token from: the callback, else the static token."""
        if self.sasl_oauthbearer_callback is not None:
            return self.sasl_oauthbearer_callback
        if self.sasl_oauthbearer_token is not None:
            return self.sasl_oauthbearer_token
        raise ValueError("OAUTHBEARER needs a token: sasl.oauthbearer.token, sasl.oauthbearer.config, "
                         "an OAuthBearerLoginModule sasl.jaas.config, or a token callback")

    @classmethod
    def from_file(cls, path: PathLike, *, oauthbearer_token_callback: TokenCallback | None = None,
                  environ: Mapping[str, str] | None = None) -> ClientSecurity:
        """`from_properties` of a ``.properties`` file (errors name the file)."""
        try:
            return cls.from_properties(load_properties(path), oauthbearer_token_callback=oauthbearer_token_callback,
                                       environ=environ)
        except ValueError as exc:
            raise ValueError(f"{os.fspath(path)}: {exc}") from None

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, oauthbearer_token_callback: TokenCallback | None = None,
                        environ: Mapping[str, str] | None = None) -> ClientSecurity:
        """Typed client settings from Kafka/librdkafka properties.  `oauthbearer_token_callback`
        gives OAUTHBEARER tokens from code (called at each authentication); `environ` replaces
        os.environ for ``${env:NAME}``.  Raises ValueError naming the key (never a secret)."""
        s = _Settings(props, _CLIENT_SECRETS, environ)
        protocol = s.choice("security.protocol", SECURITY_PROTOCOLS, "PLAINTEXT", upper=True)
        other = _check_keys(props, _CLIENT_KEYS, _RECOGNISED, tls=protocol in ("SSL", "SASL_SSL"),
                            sasl=protocol in ("SASL_PLAINTEXT", "SASL_SSL"))
        fields: dict[str, object] = {"security_protocol": protocol, "other": MappingProxyType(other)}
        if protocol in ("SSL", "SASL_SSL"):
            fields.update(_client_tls(s))
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            fields.update(_client_sasl(s, oauthbearer_token_callback))
        return cls(**fields)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        shown = []
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            default = type(self).__dataclass_fields__[name].default
            if name == "other":
                if value:
                    shown.append(f"other=<{len(value)} keys: {', '.join(sorted(value))}>")
            elif name == "sasl_oauthbearer_callback":
                if value is not None:
                    shown.append(f"{name}=<{type(value).__name__}>")
            elif value != default and value not in ({}, None):
                shown.append(f"{name}={value!r}")
        return f"ClientSecurity({', '.join(shown)})"


def _client_tls(s: _Settings) -> dict[str, object]:
    fields: dict[str, object] = {}
    ca_location = s.path("ssl.ca.location")
    truststore = _pem_store(s, "trust")
    if ca_location and truststore:
        raise ValueError("give the CA certificates once: ssl.ca.location (librdkafka) or ssl.truststore.location "
                         "(Java), not both")
    ca_pem = s.get("ssl.ca.pem") or s.get("ssl.truststore.certificates")
    if ca_location == "probe":             # librdkafka: look in the system's usual places
        ca_location = None
    fields["ssl_ca_location"] = ca_location or truststore
    fields["ssl_ca_pem"] = ca_pem or None
    certificate = s.path("ssl.certificate.location")
    key = s.path("ssl.key.location")
    keystore = _pem_store(s, "key")
    if keystore and (certificate or key):
        raise ValueError("give the client certificate once: ssl.certificate.location/ssl.key.location (librdkafka) "
                         "or ssl.keystore.location (Java, PEM), not both")
    if key and not certificate:
        raise ValueError("ssl.key.location needs ssl.certificate.location (the certificate of that key)")
    fields["ssl_certificate_location"] = certificate or keystore
    fields["ssl_key_location"] = key
    fields["ssl_key_password"] = s.secret("ssl.key.password")
    algorithm = s.get("ssl.endpoint.identification.algorithm", "https")
    if (algorithm or "").lower() not in ("https", "none", ""):
        raise ValueError(f"ssl.endpoint.identification.algorithm={algorithm!r} is not https, none or empty")
    fields["ssl_endpoint_identification"] = (algorithm or "").lower() == "https"
    fields["ssl_certificate_verification"] = s.boolean("enable.ssl.certificate.verification", True)
    fields["ssl_enabled_protocols"] = _enabled_protocols(s)
    return fields


def _client_sasl(s: _Settings, callback: TokenCallback | None) -> dict[str, object]:
    java, librdkafka = s.get("sasl.mechanism"), s.get("sasl.mechanisms")
    if java and librdkafka and java.upper() != librdkafka.upper():
        raise ValueError(f"sasl.mechanism={java!r} and sasl.mechanisms={librdkafka!r} disagree")
    mechanism = (java or librdkafka or "").upper()
    if not mechanism:
        raise ValueError(f"security.protocol {s.get('security.protocol', '')} needs sasl.mechanism: one of "
                         f"{', '.join(CLIENT_MECHANISMS)} (Kafka's default GSSAPI is not supported)")
    if mechanism not in CLIENT_MECHANISMS:
        raise ValueError(f"sasl.mechanism {mechanism} is not supported (supported: {', '.join(CLIENT_MECHANISMS)})")
    fields: dict[str, object] = {"sasl_mechanism": mechanism}
    jaas_text = s.get("sasl.jaas.config")
    module = None
    if jaas_text:
        modules = parse_jaas_config(jaas_text)
        if len(modules) != 1:
            raise ValueError(f"sasl.jaas.config holds {len(modules)} login modules; Kafka wants exactly 1")
        module = modules[0]
    if mechanism == "OAUTHBEARER":
        if (s.get("sasl.oauthbearer.method") or "default").lower() == "oidc":
            raise ValueError("sasl.oauthbearer.method=oidc: OAuth client credentials (OIDC) are not supported; "
                             "pass a token callback in code or sasl.oauthbearer.token")
        fields.update(_client_oauthbearer(s, module, callback))
        return fields
    if module is not None and module.login_module not in (_PLAIN_MODULE, _SCRAM_MODULE):
        raise ValueError(f"sasl.jaas.config: {module.login_module} does not give a user name and password for "
                         f"{mechanism} (use PlainLoginModule or ScramLoginModule)")
    username, password = s.get("sasl.username"), s.secret("sasl.password")
    if module is not None:
        if username is not None or password is not None:
            raise ValueError("give the credentials once: sasl.username/sasl.password (librdkafka) or "
                             "sasl.jaas.config (Java), not both")
        username = module.options.get("username")
        value = module.options.get("password")
        password = None if value is None else Secret(value)
        tokenauth = module.options.get("tokenauth", "false").lower() == "true"
        if tokenauth and mechanism == "PLAIN":
            raise ValueError("sasl.jaas.config: tokenauth is for SCRAM mechanisms")
        fields["sasl_scram_tokenauth"] = tokenauth
    if not username:
        raise ValueError(f"sasl.mechanism {mechanism} needs a user name (sasl.username, or username= in "
                         "sasl.jaas.config)")
    if password is None or not password.reveal():
        raise ValueError(f"sasl.mechanism {mechanism} needs a password (sasl.password, or password= in "
                         "sasl.jaas.config)")
    fields["sasl_username"] = username
    fields["sasl_password"] = password
    return fields


def _client_oauthbearer(s: _Settings, module: JaasModule | None,
                        callback: TokenCallback | None) -> dict[str, object]:
    sources: dict[str, object] = {}
    token = s.secret("sasl.oauthbearer.token")
    if token is not None:
        sources["sasl.oauthbearer.token"] = token
    config = s.get("sasl.oauthbearer.config")
    if config:
        sources["sasl.oauthbearer.config"] = _librdkafka_unsecured(config)
    if module is not None:
        if module.login_module != _OAUTH_MODULE:
            raise ValueError(f"sasl.jaas.config: OAUTHBEARER needs {_OAUTH_MODULE}, not {module.login_module}")
        if module.options:
            sources["sasl.jaas.config"] = _java_unsecured(module.options)
    if callback is not None:
        sources["a token callback"] = callback
    if len(sources) > 1:
        raise ValueError(f"OAUTHBEARER tokens come from one place; given: {', '.join(sources)}")
    if not sources:
        raise ValueError("OAUTHBEARER needs a token: sasl.oauthbearer.token, sasl.oauthbearer.config "
                         "(principal=...), an OAuthBearerLoginModule sasl.jaas.config, or a token callback")
    source = next(iter(sources.values()))
    if isinstance(source, Secret):
        return {"sasl_oauthbearer_token": source}
    return {"sasl_oauthbearer_callback": source}


# --- the broker's settings ---------------------------------------------------------------------

_BROKER_SECRETS = frozenset({"ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
                             "sasl.jaas.config", "ssl.keystore.key"})
# Settings a listener may override with the prefix listener.name.<listener, lower case>.
_LISTENER_KEYS = frozenset({"ssl.keystore.type", "ssl.keystore.location", "ssl.key.password", "ssl.truststore.type",
                            "ssl.truststore.location", "ssl.client.auth", "ssl.enabled.protocols",
                            "sasl.enabled.mechanisms"})
_BROKER_KEYS = _LISTENER_KEYS | {"listeners", "listener.security.protocol.map", "connection.failed.authentication.delay.ms",
                                 "connections.max.reauth.ms", "sasl.server.max.receive.size", "kafkacodec.users.file",
                                 "kafkacodec.acl.file"}
_BROKER_RECOGNISED = (_RECOGNISED | _CLIENT_KEYS | {"advertised.listeners", "inter.broker.listener.name",
                                                    "controller.listener.names"}) - _BROKER_KEYS
_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(?P<port>[0-9]+)")
_DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}


@dataclass(frozen=True)
class ServerSsl:
    """A TLS listener's keystore (PEM: key and certificate chain in one file), the key's
    password, the CAs client certificates are checked against, and ssl.client.auth."""

    keystore_location: str
    key_password: Secret | None = None
    truststore_location: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = TLS_PROTOCOLS


@dataclass(frozen=True)
class Listener:
    """One entry of ``listeners``: its name (upper case, as Kafka's ListenerName), the address
    (host "" = every interface, port 0 = any free port), its security protocol, and the TLS and
    SASL settings that apply to it (listener-prefixed ones first)."""

    name: str
    host: str
    port: int
    security_protocol: str
    ssl: ServerSsl | None = None
    sasl_enabled_mechanisms: tuple[str, ...] = ()

    @property
    def uses_tls(self) -> bool:
        return self.ssl is not None

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, repr=False)
class BrokerSecurity:
    """The server side's security settings (see the module docstring for the keys).  Build it
    with `from_properties`; repr() shows no secret and no value of `other`."""

    listeners: tuple[Listener, ...]
    connection_failed_authentication_delay_ms: int = 100
    connections_max_reauth_ms: int = 0
    sasl_server_max_receive_size: int = 524288
    users_file: str | None = None
    acl_file: str | None = None
    other: Mapping[str, str] = field(default_factory=dict, compare=False)

    def listener(self, name: str) -> Listener:
        for listener in self.listeners:
            if listener.name == name.upper():
                return listener
        raise KeyError(f"no listener {name!r} (listeners: {', '.join(l.name for l in self.listeners)})")

    @classmethod
    def from_file(cls, path: PathLike, *, environ: Mapping[str, str] | None = None) -> BrokerSecurity:
        """`from_properties` of a ``.properties`` file (errors name the file)."""
        try:
            return cls.from_properties(load_properties(path), environ=environ)
        except ValueError as exc:
            raise ValueError(f"{os.fspath(path)}: {exc}") from None

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, environ: Mapping[str, str] | None = None) -> BrokerSecurity:
        """Typed server settings from Kafka broker properties.  Raises ValueError naming the key
        (never a secret)."""
        s = _Settings(props, _BROKER_SECRETS, environ)
        listeners_text = s.get("listeners") or "PLAINTEXT://127.0.0.1:9092"
        protocol_map = _protocol_map(s)
        parsed = _parse_listeners(listeners_text)
        names = {name.lower() for name, _, _ in parsed}
        check: dict[str, str] = {}
        for key in props:
            if key.startswith("listener.name."):
                listener, _, rest = key[len("listener.name."):].partition(".")
                if listener not in names:
                    raise ValueError(f"{key}: no listener named {listener!r} in listeners (prefixes use the "
                                     "listener's name in lower case)")
                if rest in _BROKER_KEYS - _LISTENER_KEYS:
                    raise ValueError(f"{key}: {rest} is not a per-listener setting")
                check[key] = rest
        for name, _, _ in parsed:
            if name not in protocol_map:
                raise ValueError(f"listener {name} has no security protocol: add {name}:<protocol> to "
                                 "listener.security.protocol.map")
        protocols = {protocol_map[name] for name, _, _ in parsed}
        other = _check_keys(props, _BROKER_KEYS, _BROKER_RECOGNISED, check=check,
                            tls=bool(protocols & {"SSL", "SASL_SSL"}),
                            sasl=bool(protocols & {"SASL_PLAINTEXT", "SASL_SSL"}))
        listeners = [_listener(s, name, host, port, protocol_map[name]) for name, host, port in parsed]
        security = cls(
            listeners=tuple(listeners),
            connection_failed_authentication_delay_ms=s.integer("connection.failed.authentication.delay.ms", 100),
            connections_max_reauth_ms=s.integer("connections.max.reauth.ms", 0),
            sasl_server_max_receive_size=s.integer("sasl.server.max.receive.size", 524288, least=1),
            users_file=s.path("kafkacodec.users.file"), acl_file=s.path("kafkacodec.acl.file"),
            other=MappingProxyType(other))
        sasl = [l.name for l in security.listeners if l.uses_sasl]
        if sasl and security.users_file is None:
            raise ValueError(f"SASL listener {sasl[0]} needs kafkacodec.users.file (the credentials; "
                             "`kafkacodec users add` writes it)")
        return security

    def __repr__(self) -> str:
        listeners = ", ".join(f"{l.name}://{l.host}:{l.port} {l.security_protocol}" for l in self.listeners)
        extra = f", other=<{len(self.other)} keys: {', '.join(sorted(self.other))}>" if self.other else ""
        return (f"BrokerSecurity(listeners=[{listeners}], users_file={self.users_file!r}, "
                f"acl_file={self.acl_file!r}{extra})")


def _protocol_map(s: _Settings) -> dict[str, str]:
    text = s.get("listener.security.protocol.map")
    if not text:
        return dict(_DEFAULT_PROTOCOL_MAP)
    result: dict[str, str] = {}
    for entry in s.items("listener.security.protocol.map"):
        name, sep, protocol = entry.partition(":")
        if not sep or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL (PROTOCOL one of "
                             f"{', '.join(SECURITY_PROTOCOLS)})")
        result[name.strip().upper()] = protocol.strip().upper()
    return result


def _parse_listeners(text: str) -> list[tuple[str, str, int]]:
    parsed: list[tuple[str, str, int]] = []
    for entry in (e.strip(_TRIM) for e in text.split(",")):
        if not entry:
            continue
        match = _LISTENER.fullmatch(entry)
        if match is None:
            raise ValueError(f"listeners: {entry!r} is not NAME://HOST:PORT")
        name, host, port = match["name"].upper(), match["host"], int(match["port"])
        if port > 65535:
            raise ValueError(f"listeners: {entry!r}: port {port} is not 0..65535")
        host = host[1:-1] if host.startswith("[") else host
        if any(name == n for n, _, _ in parsed):
            raise ValueError(f"listeners: the name {name} is used twice")
        if port and any((host, port) == (h, p) for _, h, p in parsed):
            raise ValueError(f"listeners: {host or '*'}:{port} is used twice")
        parsed.append((name, host, port))
    if not parsed:
        raise ValueError("listeners is empty")
    return parsed


def _listener(s: _Settings, name: str, host: str, port: int, protocol: str) -> Listener:
    prefix = f"listener.name.{name.lower()}."

    def setting(key: str) -> str:
        return prefix + key if (prefix + key) in s.props else key

    ssl_settings = None
    if protocol in ("SSL", "SASL_SSL"):
        keystore_key = setting("ssl.keystore.location")
        store = _Settings({"ssl.keystore.location": s.props.get(keystore_key, ""),
                           "ssl.keystore.type": s.props.get(setting("ssl.keystore.type"), ""),
                           "ssl.truststore.location": s.props.get(setting("ssl.truststore.location"), ""),
                           "ssl.truststore.type": s.props.get(setting("ssl.truststore.type"), "")},
                          _BROKER_SECRETS, s.environ)
        keystore = _pem_store(store, "key")
        if keystore is None:
            raise ValueError(f"{protocol} listener {name} needs ssl.keystore.location (PEM: the private key and "
                             f"certificate chain) and ssl.keystore.type=PEM")
        truststore = _pem_store(store, "trust")
        # KIP-684: on a SASL_SSL listener only a listener-prefixed ssl.client.auth applies
        auth_key = setting("ssl.client.auth") if protocol == "SSL" else prefix + "ssl.client.auth"
        client_auth = s.choice(auth_key, SSL_CLIENT_AUTH, "none", lower=True)
        if client_auth != "none" and truststore is None:
            raise ValueError(f"listener {name}: ssl.client.auth={client_auth} needs ssl.truststore.location (the "
                             "CAs that sign client certificates)")
        ssl_settings = ServerSsl(keystore, s.secret(setting("ssl.key.password")), truststore, client_auth,
                                 _enabled_protocols(s, setting("ssl.enabled.protocols")))
    mechanisms: tuple[str, ...] = ()
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        key = setting("sasl.enabled.mechanisms")
        mechanisms = tuple(m.upper() for m in s.items(key))
        if not mechanisms:
            raise ValueError(f"{protocol} listener {name} needs sasl.enabled.mechanisms (of "
                             f"{', '.join(SERVER_MECHANISMS)}; Kafka's default GSSAPI is not supported)")
        for m in mechanisms:
            if m not in SERVER_MECHANISMS:
                raise ValueError(f"{key}: {m} is not supported on the server side (supported: "
                                 f"{', '.join(SERVER_MECHANISMS)})")
    return Listener(name, host, port, protocol, ssl_settings, mechanisms)
