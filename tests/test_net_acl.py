"""kafkacodec.net.acl: serve's read-only ACL file -- exact and prefixed topics and groups, User:*,
TLS distinguished names as principals, comments, and malformed rules named by line."""

from __future__ import annotations

import pytest

from kafkacodec.net import Acl

RULES = """\
# who                              what
User:alice                         orders            # the topic orders
User:alice                         orders-eu-*       # a prefix
User:alice                         Group:analytics
User:bob                           Group:team-*
User:bob                           Topic:audit
User:*                             public
User:analyst                       *
User:ANONYMOUS                     open
User:CN=svc,OU=Data,O=Example Inc  events  # a TLS principal
User:CN=a \\#1,O=X                  hashes
"""


@pytest.fixture(scope="module")
def acl():
    return Acl.parse(RULES, source="acl.txt")


def test_topics(acl):
    assert acl.allows_topic("User:alice", "orders")
    assert not acl.allows_topic("User:alice", "orders2")                     # exact, not a prefix
    assert acl.allows_topic("User:alice", "orders-eu-1") and acl.allows_topic("User:alice", "orders-eu-")
    assert not acl.allows_topic("User:alice", "orders-us-1")
    assert acl.allows_topic("User:bob", "audit") and not acl.allows_topic("User:bob", "orders")
    assert acl.allows_topic("User:analyst", "anything") and acl.allows_topic("User:analyst", "orders")
    assert acl.allows_topic("User:CN=svc,OU=Data,O=Example Inc", "events")
    assert acl.allows_topic("User:CN=a \\#1,O=X", "hashes")
    assert not acl.allows_topic("User:CN=svc,OU=Data,O=Example", "events")


def test_every_authenticated_principal_but_not_anonymous(acl):
    assert acl.allows_topic("User:alice", "public") and acl.allows_topic("User:someone", "public")
    assert not acl.allows_topic("User:ANONYMOUS", "public")
    assert acl.allows_topic("User:ANONYMOUS", "open") and not acl.allows_topic("User:alice", "open")


def test_groups_are_apart_from_topics(acl):
    assert acl.allows_group("User:alice", "analytics") and not acl.allows_group("User:alice", "analytics2")
    assert not acl.allows_topic("User:alice", "analytics")
    assert acl.allows_group("User:bob", "team-red") and not acl.allows_group("User:bob", "teams")
    assert not acl.allows_group("User:analyst", "g")                          # '*' is every topic only
    assert Acl.parse("User:x Group:*").allows_group("User:x", "any")


def test_topics_visible_keeps_order(acl):
    names = ["zeta", "orders-eu-2", "public", "orders", "secret"]
    assert acl.topics_visible("User:alice", names) == ["orders-eu-2", "public", "orders"]
    assert acl.topics_visible("User:nobody", names) == ["public"]
    assert Acl().topics_visible("User:alice", names) == []                    # no rules: nothing


def test_load_from_a_file(tmp_path):
    path = tmp_path / "acl"
    path.write_text(RULES)
    assert Acl.load(path).allows_topic("User:alice", "orders")
    assert len(Acl.load(path).rules) == 10 and Acl.load(path).rules[1].line == 3


@pytest.mark.parametrize("text, message", [
    ("User:alice\n", ":1: a rule is 'User:NAME RESOURCE'"),
    ("\n# ok\nalice orders\n", r":3: the principal 'alice' is not User:NAME"),
    ("Group:g orders\n", "the principal 'Group:g' is not User:NAME"),
    ("User: orders\n", ":1: the principal 'User:' is not User:NAME"),
    ("User:a ord#ers\n", "'ord#ers' is not a topic name"),
    ("User:a or*ders\n", r"'or\*ders' is not a topic name.*only ends a prefix"),
    ("User:a Group:\n", "the group name is empty"),
    ("User:a Group:a*b*\n", "only ends a group prefix"),
])
def test_malformed_rules_name_the_line(tmp_path, text, message):
    path = tmp_path / "acl"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}{message}" if message.startswith(":") else message):
        Acl.load(path)
