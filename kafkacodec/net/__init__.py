"""kafkacodec's network layer: one event loop (`loop`) and one connection (`connection`: frames,
deadlines, KIP-72/81 memory muting) over one transport (`transport`: plain or TLS) for the client
side (`client`: connecting, responses into a ring; the consumer core, the mirror, the gateway's
upstream) and the server side (`kafkacodec serve`), messages written from `pieces`.  Its security
building blocks are pure modules without socket I/O of their own: `properties` (Java .properties files and
the typed ClientSecurity / BrokerSecurity settings), `tls` (SSL contexts, the peer's principal),
`sasl` (the SASL mechanisms as state machines over bytes, Kafka's handshake flows, KIP-368
re-authentication), `users` (the credentials file of salted hashes) and `acl` (serve's read-only
ACLs).  docs/security.md is their reference."""

from kafkacodec.net._secret import Secret
from kafkacodec.net.acl import Acl, AclRule
from kafkacodec.net.properties import (BrokerSecurity, ClientSecurity, JaasModule, Listener, ServerSsl,
                                       load_properties, parse_jaas_config, parse_properties)
from kafkacodec.net.sasl import (CredentialStore, OAuthBearerClient, OAuthBearerToken, PlainClient,
                                 PlainCredential, PlainServer, SaslClient, SaslFlow, SaslServer, ScramClient,
                                 ScramCredential, ScramServer, TokenCallback, check_reauthentication, client_for,
                                 reauthentication_delay_ms, reauthentication_supported, sasl_flow, server_for,
                                 session_lifetime_ms)
from kafkacodec.net.tls import client_context, distinguished_name, kernel_tls_send, peer_principal, server_context
from kafkacodec.net.users import UsersFile, add_user, remove_user

__all__ = [
    "Secret",
    "Acl", "AclRule",
    "BrokerSecurity", "ClientSecurity", "JaasModule", "Listener", "ServerSsl", "load_properties",
    "parse_jaas_config", "parse_properties",
    "CredentialStore", "OAuthBearerClient", "OAuthBearerToken", "PlainClient", "PlainCredential", "PlainServer",
    "SaslClient", "SaslFlow", "SaslServer", "ScramClient", "ScramCredential", "ScramServer", "TokenCallback",
    "check_reauthentication", "client_for", "reauthentication_delay_ms", "reauthentication_supported",
    "sasl_flow", "server_for", "session_lifetime_ms",
    "client_context", "distinguished_name", "kernel_tls_send", "peer_principal", "server_context",
    "UsersFile", "add_user", "remove_user",
]
