"""Target topics the mirror creates, as MirrorMaker 2 does: the source topic's partition count
and the configs set on it (DescribeConfigs: those whose source is the topic's own dynamic
config, not the broker defaults), less the ones that describe the source cluster's brokers
rather than the data (MM2's default exclusions: replication throttles, min.insync.replicas,
unclean leader election, the message timestamp settings).  Replication factor: the target's
default (-1, KIP-464: CreateTopics v4+)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kafkacodec.consumer._cluster import BrokerError, Cluster
from kafkacodec.errors import UnsupportedVersionError
from kafkacodec.protocol import control
from kafkacodec.protocol.api import ApiKey, Error

__all__ = ["source_configs", "create_topics", "NOT_COPIED"]

#: DescribeConfigs config_source of a config set on the topic itself (DYNAMIC_TOPIC_CONFIG).
TOPIC_CONFIG_SOURCE = 1

#: Configs never copied (MirrorMaker 2's DefaultConfigPropertyFilter excludes the same).
NOT_COPIED = frozenset({
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms", "message.timestamp.type",
    "unclean.leader.election.enable", "min.insync.replicas"})


def source_configs(cluster: Cluster, topics: Iterable[str], client_id: str) -> dict[str, dict[str, str]] | None:
    """{topic: configs set on it} from the source, or None when the source cannot say (a
    broker without DescribeConfigs v1+, e.g. librdkafka's mock): then none are copied."""
    topics = list(topics)
    try:
        answer = cluster.call(None, ApiKey.DESCRIBE_CONFIGS,
                              control.request_encoder(control.describe_configs_request(topics), client_id),
                              control.response_decoder(ApiKey.DESCRIBE_CONFIGS),
                              max_version=control.MAX_VERSIONS[ApiKey.DESCRIBE_CONFIGS], min_version=1)
    except UnsupportedVersionError:
        return None
    found: dict[str, dict[str, str]] = {}
    for result in answer.results:
        if result.error_code != Error.NONE:
            raise BrokerError(f"DescribeConfigs of source topic {result.resource_name!r} failed: "
                              f"{result.error_message or Error.name_of(result.error_code)}",
                              error_code=result.error_code)
        found[result.resource_name] = {
            c.name: c.value for c in result.configs
            if c.config_source == TOPIC_CONFIG_SOURCE and c.value is not None and not c.is_sensitive
            and c.name not in NOT_COPIED}
    return found


def create_topics(cluster: Cluster, topics: Mapping[str, tuple[int, Mapping[str, str]]], client_id: str,
                  timeout_ms: int) -> None:
    """Create {name: (partitions, configs)} on the target; one already there (a race with
    another creator) is fine.  BrokerError naming the topic and Kafka's reason otherwise."""
    answer = cluster.call(None, ApiKey.CREATE_TOPICS,
                          control.request_encoder(control.create_topics_request(topics, timeout_ms=timeout_ms),
                                                  client_id),
                          control.response_decoder(ApiKey.CREATE_TOPICS),
                          max_version=control.MAX_VERSIONS[ApiKey.CREATE_TOPICS], min_version=4)
    for topic in answer.topics:
        if topic.error_code not in (Error.NONE, Error.TOPIC_ALREADY_EXISTS):
            raise BrokerError(f"cannot create target topic {topic.name!r}: "
                              f"{topic.error_message or Error.name_of(topic.error_code)}",
                              error_code=topic.error_code, topic=topic.name)
