"""ACLs for ``kafkacodec serve`` (``kafkacodec.acl.file``): which principals may read which
topics, write which (``serve --upstream --produce``) and use which consumer groups.

Format (text, UTF-8, one rule a line)::

    # who                              what
    User:alice                         orders            # the topic orders
    User:alice                         orders-*          # every topic whose name starts with orders-
    User:alice                         Group:analytics   # the consumer group analytics
    User:bob                           Group:team-*      # groups starting with team-
    User:*                             public            # every authenticated principal
    User:analyst                       *                 # every topic
    User:ingest                        Write:orders-*    # produce to topics starting with orders-
    User:ingest                        TransactionalId:ingest-*   # transactions with these ids
    User:CN=svc,OU=Data,O=Example Inc  events            # a TLS principal (spaces, commas)

- A rule is a principal and a resource.  The resource is the last blank-separated word of the
  line, the principal all before it (so TLS distinguished names, which hold commas and spaces,
  need no quoting).
- The principal is ``User:NAME`` as authentication names it (SASL: ``User:<user name>``; TLS:
  ``User:`` + the certificate's RFC 2253 subject, kafkacodec.net.tls.peer_principal), or
  ``User:*`` for every authenticated principal.  ``User:ANONYMOUS`` (a PLAINTEXT listener, TLS
  without a client certificate) is not matched by ``User:*``: it needs rules of its own.
- The resource is a topic name (``Topic:NAME`` is the same), ``Write:NAME`` for producing to
  a topic (through ``serve --upstream --produce``; it does not allow reading),
  ``TransactionalId:NAME`` for a producer's transactional id (``--produce`` too), or
  ``Group:NAME`` for a consumer group.  A trailing ``*`` makes it a prefix (Kafka's PREFIXED pattern type); ``*`` alone is
  every topic (``Group:*`` every group).  Topic names are Kafka's (a-z A-Z 0-9 . _ -).
- ``#`` at the start of a line or after a blank starts a comment; blank lines are ignored.

Rules only allow (there is no deny); allowing a topic allows reading and describing it, and
only a ``Write:`` rule allows producing.  Without rules nothing is allowed.  A malformed rule raises ValueError
naming the file and line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Union

from kafkacodec.net._text import read_utf8

__all__ = ["Acl", "AclRule"]

ANONYMOUS = "User:ANONYMOUS"
EVERY_PRINCIPAL = "User:*"
PathLike = Union[str, "os.PathLike[str]"]

_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_COMMENT = re.compile(r"(?:^|\s)#")


@dataclass(frozen=True)
class AclRule:
    """One rule: `principal` (``User:NAME`` or ``User:*``) may use the topics or groups
    (`kind` "topic" / "group") named `name` (a prefix when `prefix`; "" with prefix = all)."""

    principal: str
    kind: str
    name: str
    prefix: bool
    line: int = 0

    def matches(self, resource: str) -> bool:
        return resource.startswith(self.name) if self.prefix else resource == self.name


@dataclass
class _Grants:
    exact: set[str] = field(default_factory=set)
    prefixes: list[str] = field(default_factory=list)

    def allows(self, name: str) -> bool:
        return name in self.exact or any(name.startswith(p) for p in self.prefixes)


class Acl:
    """The rules of an ACL file, indexed by principal and resource kind."""

    def __init__(self, rules: Iterable[AclRule] = ()) -> None:
        self.rules = tuple(rules)
        self._grants: dict[tuple[str, str], _Grants] = {}
        for rule in self.rules:
            grants = self._grants.setdefault((rule.principal, rule.kind), _Grants())
            if rule.prefix:
                grants.prefixes.append(rule.name)
            else:
                grants.exact.add(rule.name)

    @classmethod
    def load(cls, path: PathLike) -> Acl:
        """Read an ACL file (errors name the file and line)."""
        text, _ = read_utf8(path)
        return cls.parse(text, source=os.fspath(path))

    @classmethod
    def parse(cls, text: str, *, source: str = "<acl>") -> Acl:
        return cls(_parse_rule(line, f"{source}:{number}", number)
                   for number, line in enumerate(text.splitlines(), 1)
                   if _COMMENT.split(line, 1)[0].strip())

    def _allows(self, principal: str, kind: str, name: str) -> bool:
        for who in (principal, EVERY_PRINCIPAL) if principal != ANONYMOUS else (principal,):
            grants = self._grants.get((who, kind))
            if grants is not None and grants.allows(name):
                return True
        return False

    def allows_topic(self, principal: str, topic: str) -> bool:
        """May `principal` read (and describe) `topic`?"""
        return self._allows(principal, "topic", topic)

    def allows_write(self, principal: str, topic: str) -> bool:
        """May `principal` produce to `topic`?"""
        return self._allows(principal, "write", topic)

    def allows_transactional_id(self, principal: str, transactional_id: str) -> bool:
        """May `principal` run transactions with `transactional_id` (a producer's)?"""
        return self._allows(principal, "transactional_id", transactional_id)

    def allows_group(self, principal: str, group: str) -> bool:
        """May `principal` use the consumer group `group` (join it, commit and fetch offsets)?"""
        return self._allows(principal, "group", group)

    def topics_visible(self, principal: str, names: Iterable[str]) -> list[str]:
        """The topics of `names` that `principal` may see (a Metadata answer's topics), in order."""
        return [name for name in names if self.allows_topic(principal, name)]

    def __repr__(self) -> str:
        return f"Acl({len(self.rules)} rules)"


def _parse_rule(line: str, where: str, number: int) -> AclRule:
    content = _COMMENT.split(line, 1)[0].strip()
    parts = content.rsplit(None, 1)
    if len(parts) != 2:
        raise ValueError(f"{where}: a rule is 'User:NAME RESOURCE' (a topic, TOPIC-PREFIX*, Write:TOPIC, "
                         f"TransactionalId:ID or Group:GROUP); "
                         f"got {content!r}")
    principal, resource = parts[0].strip(), parts[1]
    if not principal.startswith("User:") or principal == "User:":
        raise ValueError(f"{where}: the principal {principal!r} is not User:NAME (or User:*)")
    kind = "topic"
    if resource.startswith("Group:"):
        kind, resource = "group", resource[len("Group:"):]
    elif resource.startswith("Write:"):
        kind, resource = "write", resource[len("Write:"):]
    elif resource.startswith("TransactionalId:"):
        kind, resource = "transactional_id", resource[len("TransactionalId:"):]
    elif resource.startswith("Topic:"):
        resource = resource[len("Topic:"):]
    prefix = resource.endswith("*")
    name = resource[:-1] if prefix else resource
    if not name and not prefix:
        raise ValueError(f"{where}: the {kind} name is empty")
    if kind in ("topic", "write") and name and not _TOPIC.fullmatch(name):
        raise ValueError(f"{where}: {name!r} is not a topic name (Kafka's are a-z A-Z 0-9 . _ -)"
                         + ("; a '*' only ends a prefix" if "*" in name else ""))
    if kind in ("group", "transactional_id") and "*" in name:
        raise ValueError(f"{where}: a '*' only ends a group prefix ({resource!r})")
    return AclRule(principal, kind, name, prefix, number)
