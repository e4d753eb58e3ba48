"""`kafkacodec serve`: a read-only Kafka broker over log directories, for every client old and
new (docs/serve.md).

    from kafkacodec.serve import Server
    with Server(["/var/kafka-logs"], listen=("127.0.0.1", 0), state_dir="/tmp/serve-state") as s:
        ...   # consumers bootstrap from f"127.0.0.1:{s.port}"

Modules, one concept each: `config` (settings), `logview` (the log directories, each
partition a `logdir.partition_log.PartitionLog` followed live), `dispatch` (request header,
versions, stateless APIs), `fetch` (the Fetch path and the long poll), `groups` (group
coordinator and offset APIs), `offsets` (the persisted offset store), `metrics` (Prometheus),
`server` (the loop thread wiring them together).
"""

from kafkacodec.serve.config import ServeConfig, parse_host_port
from kafkacodec.serve.server import Server

__all__ = ["Server", "ServeConfig", "parse_host_port"]
