"""The group coordinator (Kafka's classic group protocol) and the offset APIs.

The server is the coordinator of every group (FindCoordinator answers with itself).  A group
moves through Kafka's states: Empty -> PreparingRebalance (members (re)join; the join answers
wait until every known member has rejoined, or the rebalance timeout drops those that did not;
the first join of an empty group waits group.initial.rebalance.delay.ms) -> CompletingRebalance
(generation incremented, the protocol most members prefer chosen, the leader member given
everyone's metadata) -> Stable once the leader's SyncGroup brings the assignments (opaque bytes,
handed to each member).  A member that sends nothing for its session timeout is removed and
the group rebalances.  Errors as Kafka's: UNKNOWN_MEMBER_ID (25), ILLEGAL_GENERATION (22),
REBALANCE_IN_PROGRESS (27), INCONSISTENT_GROUP_PROTOCOL (23: a join without a protocol type or
protocols, or whose type or protocols the group's members do not share), INVALID_GROUP_ID (24),
INVALID_SESSION_TIMEOUT (26: outside group.{min,max}.session.timeout.ms).

Offsets: OffsetCommit from the group's current generation (or from a consumer outside any
group, generation -1, while the group has no members), stored by the offset store before the
answer; OffsetFetch answers -1 for partitions without a committed offset.  The store answers
by callback (`save`, `load`): offsets.OffsetStore at once, serve --upstream's when the cluster
did (dispatch.Answers builds the answer then; nothing waits).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkacodec.protocol import messages as m
from kafkacodec.protocol.api import Error
from kafkacodec.serve.dispatch import READ_ONLY, Answers, Request
from kafkacodec.serve.offsets import CommittedOffset

if TYPE_CHECKING:
    from kafkacodec.net.loop import Timer
    from kafkacodec.serve.server import Server

__all__ = ["GroupCoordinator"]

log = logging.getLogger("kafkacodec.serve")

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
_EXPIRY_CHECK_S = 0.2


@dataclass
class _Member:
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_seen: float
    join: Request | None = None
    sync: Request | None = None
    assignment: bytes = b""


@dataclass
class _Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    timer: Timer | None = None
    initial: bool = False              # the rebalance started from an empty group


class GroupCoordinator:
    def __init__(self, server: Server):
        self.server = server
        self.groups: dict[str, _Group] = {}
        self._expiry = server.loop.call_later(_EXPIRY_CHECK_S, self._expire)

    # --- FindCoordinator -----------------------------------------------------------------------
    def find_coordinator(self, req: Request, body: dict[str, Any]) -> None:
        node = self.server.config.node_id
        host, port = req.conn.listener.advertised if req.conn.listener else self.server.advertised
        # a transactional id: the gateway forwards transactions with --produce (serve/transactions.py)
        transactional = body["key_type"] == 1
        keys = body["coordinator_keys"] if req.api_version >= 4 else [body["key"]]
        produce = self.server.config.produce

        def entry(key: str) -> dict[str, Any]:
            if transactional and not produce:
                error, message = Error.POLICY_VIOLATION, READ_ONLY
            elif transactional and not self.server.may_use_transactional_id(req.conn.principal, key):
                error, message = Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
            elif not transactional and not self.server.may_use_group(req.conn.principal, key):
                error, message = Error.GROUP_AUTHORIZATION_FAILED, None
            else:
                error, message = Error.NONE, None
            return {"key": key, "node_id": node if not error else -1, "host": host if not error else "",
                    "port": port if not error else -1, "error_code": error, "error_message": message}
        coordinators = [entry(k) for k in keys]
        first = coordinators[0] if coordinators else entry("")
        req.respond(m.FIND_COORDINATOR_RESPONSE.encode(req.api_version, {
            **{k: first[k] for k in ("error_code", "error_message", "node_id", "host", "port")},
            "coordinators": coordinators}))

    def _group_refused(self, req: Request, group_id: str) -> bool:
        """GROUP_AUTHORIZATION_FAILED for a principal the ACLs do not let use the group."""
        return not self.server.may_use_group(req.conn.principal, group_id)

    # --- JoinGroup -----------------------------------------------------------------------------
    def join(self, req: Request, body: dict[str, Any]) -> None:
        group_id, member_id = body["group_id"], body["member_id"]
        session = body["session_timeout_ms"]
        rebalance = body["rebalance_timeout_ms"] if body["rebalance_timeout_ms"] > 0 else session
        protocols = [(p["name"], p["metadata"]) for p in body["protocols"]]
        group = self.groups.get(group_id)
        error = (Error.GROUP_AUTHORIZATION_FAILED if self._group_refused(req, group_id)
                 else self._join_error(group, body, {name for name, _ in protocols}))
        if error:
            self._join_answer(req, error, member_id=member_id)
            return
        if group is None:
            group = self.groups[group_id] = _Group(group_id)
        if not member_id:
            member_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
        now = time.monotonic()
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = _Member(
                member_id, body["group_instance_id"], session, rebalance, body["protocol_type"],
                protocols, now)
            changed = True
        else:
            if member.join is not None:           # a duplicate join: the older one is superseded
                self._join_answer(member.join, Error.UNKNOWN_MEMBER_ID, member_id=member_id)
                member.join = None
            changed = member.protocols != protocols
            member.session_timeout_ms, member.rebalance_timeout_ms = session, rebalance
            member.protocols = protocols
            member.last_seen = now
        group.protocol_type = body["protocol_type"]
        # Kafka's GroupCoordinator: a known member rejoining with the same metadata gets the
        # current generation back, unless it is the leader of a stable group (whose rejoin
        # means the subscriptions may have changed)
        if not changed and (group.state == COMPLETING
                            or (group.state == STABLE and member_id != group.leader)):
            self._join_answer(req, Error.NONE, group, member_id,
                              self._leader_view(group) if member_id == group.leader else [])
            return
        member.join = req
        if group.state != PREPARING:
            self._prepare(group)
        self._maybe_complete_join(group)

    def _join_error(self, group: _Group | None, body: dict[str, Any], protocols: set[str]) -> int:
        """Kafka's checks of a JoinGroup, in its order (GroupCoordinatorService.joinGroup, then
        GroupMetadataManager's classic join): the group id, the session timeout within
        group.{min,max}.session.timeout.ms, a member id the group knows (the protocols are
        checked first when the group exists)."""
        config = self.server.config
        if not body["group_id"]:
            return Error.INVALID_GROUP_ID
        if not config.group_min_session_timeout_ms <= body["session_timeout_ms"] \
                <= config.group_max_session_timeout_ms:
            return Error.INVALID_SESSION_TIMEOUT
        member_id = body["member_id"]
        if member_id and group is None:
            return Error.UNKNOWN_MEMBER_ID
        if not self._supports(group, body["protocol_type"], protocols):
            return Error.INCONSISTENT_GROUP_PROTOCOL
        if member_id and group is not None and member_id not in group.members:
            return Error.UNKNOWN_MEMBER_ID
        return Error.NONE

    @staticmethod
    def _supports(group: _Group | None, protocol_type: str, protocols: set[str]) -> bool:
        """ClassicGroup.supportsProtocols: an empty group takes a protocol type and at least one
        protocol; a group with members its own type and a protocol every member (the joining one
        too, when it is a member) supports.  So every member always shares one with the others,
        which the protocol vote relies on."""
        if group is None or not group.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == group.protocol_type and any(
            all(name in dict(mm.protocols) for mm in group.members.values()) for name in protocols)

    def _prepare(self, group: _Group) -> None:
        """To PreparingRebalance: pending syncs are told REBALANCE_IN_PROGRESS; the join
        answers wait for every member or the rebalance timeout."""
        for member in group.members.values():
            if member.sync is not None:
                self._sync_answer(member.sync, Error.REBALANCE_IN_PROGRESS)
                member.sync = None
        group.initial = group.state == EMPTY
        group.state = PREPARING
        if group.timer is not None:
            group.timer.cancel()
        if group.initial:
            delay = self.server.config.group_initial_rebalance_delay_ms
        else:
            delay = max((mm.rebalance_timeout_ms for mm in group.members.values()), default=0)
        group.timer = self.server.loop.call_later(delay / 1000, lambda: self._complete_join(group))

    def _maybe_complete_join(self, group: _Group) -> None:
        if group.state == PREPARING and not (group.initial and group.timer is not None) \
                and all(mm.join is not None for mm in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        if group.state != PREPARING:
            return
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        if group.initial:
            group.initial = False
            if not all(mm.join is not None for mm in group.members.values()):
                # the initial delay is over; wait for the members still rejoining
                delay = max((mm.rebalance_timeout_ms for mm in group.members.values()), default=0)
                group.timer = self.server.loop.call_later(delay / 1000, lambda: self._complete_join(group))
                return
        for member_id in [k for k, mm in group.members.items() if mm.join is None]:
            log.info("group %s: member %s did not rejoin in time", group.group_id, member_id)
            del group.members[member_id]
        group.generation += 1
        if not group.members:
            group.state, group.protocol_name, group.leader = EMPTY, None, None
            return
        group.protocol_name = self._vote(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        now = time.monotonic()
        leader_view = self._leader_view(group)
        for member in group.members.values():
            assert member.join is not None
            member.last_seen = now
            self._join_answer(member.join, Error.NONE, group, member.member_id,
                              leader_view if member.member_id == group.leader else [])
            member.join = None

    @staticmethod
    def _leader_view(group: _Group) -> list[dict[str, Any]]:
        """Every member and its metadata for the chosen protocol (the leader assigns)."""
        assert group.protocol_name is not None
        return [{"member_id": mm.member_id, "group_instance_id": mm.group_instance_id,
                 "metadata": dict(mm.protocols)[group.protocol_name]} for mm in group.members.values()]

    @staticmethod
    def _vote(group: _Group) -> str:
        candidates = set.intersection(*({n for n, _ in mm.protocols} for mm in group.members.values()))
        votes: dict[str, int] = {}
        for mm in group.members.values():
            choice = next(n for n, _ in mm.protocols if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda n: votes[n])

    def _join_answer(self, req: Request, error: int, group: _Group | None = None, member_id: str = "",
                     members: list[dict[str, Any]] | None = None) -> None:
        ok = group is not None and not error
        req.respond(m.JOIN_GROUP_RESPONSE.encode(req.api_version, {
            "error_code": error,
            "generation_id": group.generation if ok and group else -1,
            "protocol_type": group.protocol_type if ok and group else None,
            "protocol_name": group.protocol_name if ok and group else ("" if req.api_version < 7 else None),
            "leader": (group.leader or "") if ok and group else "",
            "member_id": member_id, "members": members or []}))

    # --- SyncGroup -----------------------------------------------------------------------------
    def sync(self, req: Request, body: dict[str, Any]) -> None:
        group = self.groups.get(body["group_id"])
        member = group.members.get(body["member_id"]) if group is not None else None
        if self._group_refused(req, body["group_id"]):
            self._sync_answer(req, Error.GROUP_AUTHORIZATION_FAILED)
            return
        if group is None or member is None:
            self._sync_answer(req, Error.UNKNOWN_MEMBER_ID)
            return
        if body["generation_id"] != group.generation:
            self._sync_answer(req, Error.ILLEGAL_GENERATION)
            return
        if (body["protocol_type"] is not None and body["protocol_type"] != group.protocol_type) or \
                (body["protocol_name"] is not None and body["protocol_name"] != group.protocol_name):
            self._sync_answer(req, Error.INCONSISTENT_GROUP_PROTOCOL)
            return
        member.last_seen = time.monotonic()
        if group.state == PREPARING:
            self._sync_answer(req, Error.REBALANCE_IN_PROGRESS)
            return
        if group.state == STABLE:
            self._sync_answer(req, Error.NONE, group, member.assignment)
            return
        member.sync = req
        if member.member_id == group.leader:
            assignments = {a["member_id"]: a["assignment"] for a in body["assignments"]}
            group.state = STABLE
            for mm in group.members.values():
                mm.assignment = assignments.get(mm.member_id, b"")
                if mm.sync is not None:
                    self._sync_answer(mm.sync, Error.NONE, group, mm.assignment)
                    mm.sync = None

    def _sync_answer(self, req: Request, error: int, group: _Group | None = None,
                     assignment: bytes = b"") -> None:
        req.respond(m.SYNC_GROUP_RESPONSE.encode(req.api_version, {
            "error_code": error,
            "protocol_type": group.protocol_type if group is not None and not error else None,
            "protocol_name": group.protocol_name if group is not None and not error else None,
            "assignment": assignment}))

    # --- Heartbeat, LeaveGroup -----------------------------------------------------------------
    def heartbeat(self, req: Request, body: dict[str, Any]) -> None:
        group = self.groups.get(body["group_id"])
        member = group.members.get(body["member_id"]) if group is not None else None
        if self._group_refused(req, body["group_id"]):
            error = Error.GROUP_AUTHORIZATION_FAILED
        elif group is None or member is None:
            error = Error.UNKNOWN_MEMBER_ID
        elif body["generation_id"] != group.generation:
            error = Error.ILLEGAL_GENERATION
        else:
            member.last_seen = time.monotonic()
            error = Error.REBALANCE_IN_PROGRESS if group.state == PREPARING else Error.NONE
        req.respond(m.HEARTBEAT_RESPONSE.encode(req.api_version, {"error_code": error}))

    def leave(self, req: Request, body: dict[str, Any]) -> None:
        if self._group_refused(req, body["group_id"]):
            req.respond(m.LEAVE_GROUP_RESPONSE.encode(req.api_version, {
                "error_code": Error.GROUP_AUTHORIZATION_FAILED, "members": []}))
            return
        group = self.groups.get(body["group_id"])
        if req.api_version >= 3:
            leaving = [(mm["member_id"], mm["group_instance_id"]) for mm in body["members"]]
        else:
            leaving = [(body["member_id"], None)]
        results = []
        removed = False
        for member_id, instance in leaving:
            known = group is not None and member_id in group.members
            results.append({"member_id": member_id, "group_instance_id": instance,
                            "error_code": Error.NONE if known else Error.UNKNOWN_MEMBER_ID})
            if known:
                assert group is not None
                self._remove(group, member_id)
                removed = True
        top = (Error.NONE if req.api_version >= 3 or results[0]["error_code"] == Error.NONE
               else Error.UNKNOWN_MEMBER_ID)
        req.respond(m.LEAVE_GROUP_RESPONSE.encode(req.api_version, {"error_code": top, "members": results}))
        if removed and group is not None:
            self._after_removal(group)

    def _remove(self, group: _Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.join is not None:
            self._join_answer(member.join, Error.UNKNOWN_MEMBER_ID, member_id=member_id)
        if member.sync is not None:
            self._sync_answer(member.sync, Error.UNKNOWN_MEMBER_ID)

    def _after_removal(self, group: _Group) -> None:
        if group.state == PREPARING:
            self._maybe_complete_join(group)
            if not group.members:
                self._complete_join(group)
        elif group.members:
            self._prepare(group)
        else:
            group.generation += 1
            group.state, group.protocol_name, group.leader = EMPTY, None, None

    def _expire(self) -> None:
        """Members silent for longer than their session timeout leave the group."""
        now = time.monotonic()
        for group in list(self.groups.values()):
            expired = [mm.member_id for mm in group.members.values()
                       if mm.join is None and now - mm.last_seen > mm.session_timeout_ms / 1000]
            for member_id in expired:
                log.info("group %s: member %s expired (no heartbeat)", group.group_id, member_id)
                self._remove(group, member_id)
            if expired:
                self._after_removal(group)
        self._expiry = self.server.loop.call_later(_EXPIRY_CHECK_S, self._expire)

    def close(self) -> None:
        self._expiry.cancel()
        for group in self.groups.values():
            if group.timer is not None:
                group.timer.cancel()

    # --- offsets -------------------------------------------------------------------------------
    def member_error(self, group_id: str, generation: int, member_id: str) -> int:
        """Kafka's check of a commit that names its member and generation (OffsetCommit v1+,
        TxnOffsetCommit v3+): Error.NONE, or why the group refuses it."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return Error.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return Error.ILLEGAL_GENERATION
        if group.state in (PREPARING, COMPLETING):
            return Error.REBALANCE_IN_PROGRESS
        member.last_seen = time.monotonic()
        return Error.NONE

    def commit(self, req: Request, body: dict[str, Any]) -> None:
        version = req.api_version
        group_id = body["group_id"]
        group = self.groups.get(group_id)
        generation = body["generation_id_or_member_epoch"]
        member_id = body["member_id"]
        error: int = Error.NONE
        if version >= 1 and (generation >= 0 or member_id):
            error = self.member_error(group_id, generation, member_id)
        elif group is not None and group.members:
            error = Error.ILLEGAL_GENERATION         # a consumer outside the group while it has members
        if self._group_refused(req, group_id):       # Kafka checks READ on the group first
            error = Error.GROUP_AUTHORIZATION_FAILED
        results: dict[tuple[str, int], int] = {}
        offsets: dict[tuple[str, int], CommittedOffset] = {}
        view = self.server.view
        limit = self.server.config.offset_metadata_max_bytes
        for t in body["topics"]:
            for p in t["partitions"]:
                key = (t["name"], p["partition_index"])
                if error:
                    results[key] = error
                elif not self.server.may_read(req.conn.principal, key[0]):
                    results[key] = Error.TOPIC_AUTHORIZATION_FAILED
                elif view.partition(*key) is None:
                    results[key] = Error.UNKNOWN_TOPIC_OR_PARTITION
                elif p["committed_metadata"] is not None and len(p["committed_metadata"].encode()) > limit:
                    results[key] = Error.OFFSET_METADATA_TOO_LARGE
                else:
                    results[key] = Error.NONE
                    offsets[key] = CommittedOffset(p["committed_offset"], p["committed_leader_epoch"],
                                                   p["committed_metadata"], p["commit_timestamp"])
        answers = Answers(req)

        def stored(_: Any, error: BaseException | None) -> None:
            if error is not None:                # a full disk, or serve --upstream's cluster
                log.error("cannot store the offsets of group %s: %s", group_id, error)
                for key in offsets:
                    results[key] = Error.COORDINATOR_NOT_AVAILABLE

        def build() -> None:
            topics: dict[str, list[dict[str, int]]] = {}
            for (topic, partition), code in results.items():
                topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
            req.respond(m.OFFSET_COMMIT_RESPONSE.encode(version, {"topics": [
                {"name": name, "partitions": parts} for name, parts in topics.items()]}))

        if offsets:
            self.server.offsets.save(group_id, offsets, answers.expect(stored))
        answers.ready(build)

    def fetch_offsets(self, req: Request, body: dict[str, Any]) -> None:
        version = req.api_version
        answers = Answers(req)
        wanted = body["groups"] if version >= 8 else [
            {"group_id": body["group_id"], "topics": body["topics"]}]
        groups: list[dict[str, Any]] = []
        principal = req.conn.principal
        for g in wanted:
            entry: dict[str, Any] = {"group_id": g["group_id"], "error_code": Error.NONE, "topics": []}
            groups.append(entry)
            if self._group_refused(req, g["group_id"]):
                entry["topics"], entry["error_code"] = _every_partition(
                    g["topics"], Error.GROUP_AUTHORIZATION_FAILED), Error.GROUP_AUTHORIZATION_FAILED
                continue
            self.server.offsets.load(g["group_id"], answers.expect(
                functools.partial(self._fill_offsets, entry, g["topics"], principal)))

        def build() -> None:
            if version >= 8:
                req.respond(m.OFFSET_FETCH_RESPONSE.encode(version, {"groups": groups}))
            else:
                req.respond(m.OFFSET_FETCH_RESPONSE.encode(version, {
                    "topics": groups[0]["topics"], "error_code": groups[0]["error_code"]}))

        answers.ready(build)

    def _fill_offsets(self, entry: dict[str, Any], topics: list[dict[str, Any]] | None, principal: str,
                      stored: dict[tuple[str, int], CommittedOffset] | None,
                      error: BaseException | None) -> None:
        entry["topics"], entry["error_code"] = self._committed(entry["group_id"], topics, principal,
                                                               stored, error)

    def _committed(self, group_id: str, topics: list[dict[str, Any]] | None, principal: str,
                   stored: dict[tuple[str, int], CommittedOffset] | None,
                   error: BaseException | None) -> tuple[list[dict[str, Any]], int]:
        """The rows answering OffsetFetch, and the group's error code, from what the store
        loaded (or its failure); topics the principal may not read are TOPIC_AUTHORIZATION_FAILED
        when named, left out of "every partition" (Kafka's rules)."""
        if error is not None or stored is None:  # serve --upstream: the cluster did not answer
            log.warning("offsets of group %s: %s", group_id, error)
            return _every_partition(topics, Error.COORDINATOR_NOT_AVAILABLE), Error.COORDINATOR_NOT_AVAILABLE
        may_read = self.server.may_read
        if topics is None:                       # every partition with an offset
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(stored):
                if may_read(principal, topic):
                    wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t["name"]: list(t["partition_indexes"]) for t in topics}
        out = []
        for topic, partitions in wanted.items():
            allowed = may_read(principal, topic)
            rows = []
            for partition in partitions:
                found = stored.get((topic, partition)) if allowed else None
                rows.append({"partition_index": partition,
                             "committed_offset": found.offset if found else -1,
                             "committed_leader_epoch": found.leader_epoch if found else -1,
                             "metadata": (found.metadata if found else "") or "",
                             "error_code": Error.NONE if allowed else Error.TOPIC_AUTHORIZATION_FAILED})
            out.append({"name": topic, "partitions": rows})
        return out, Error.NONE


def _every_partition(topics: list[dict[str, Any]] | None, error: int) -> list[dict[str, Any]]:
    """OffsetFetch rows of the partitions asked for, each failing with `error`."""
    return [{"name": t["name"], "partitions": [
        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
         "metadata": "", "error_code": error} for p in t["partition_indexes"]]} for t in topics or []]
