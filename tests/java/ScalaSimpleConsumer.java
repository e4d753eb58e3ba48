// Kafka 0.8.2's Scala client (org.apache.kafka:kafka_2.10:0.8.2.2, its javaapi SimpleConsumer)
// reading through a broker that is every partition's leader (kafkacodec serve), for
// tests/test_serve_upstream.py: TopicMetadataRequest (Metadata v0), OffsetRequest (ListOffsets
// v0) for the earliest offset or OffsetFetchRequest (OffsetFetch v0/v1) for the group's,
// FetchRequest (Fetch v0: magic 0 message sets), then OffsetCommitRequest (OffsetCommit v0/v1)
// of the position after what it read.
//
// args: HOST:PORT GROUP TOPIC:PARTITION:COUNT[,...] START(earliest|committed) COMMIT_VERSION(0|1) TIMEOUT_MS
// stdout: one line per record, "topic partition offset key value" (hex, "-" for null);
// exit 0 once COUNT records of every partition were read and the offsets committed, 2 on
// timeout, 1 with an error (stderr: "failed: " and what).

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import kafka.api.FetchRequestBuilder;
import kafka.api.PartitionOffsetRequestInfo;
import kafka.common.OffsetAndMetadata;
import kafka.common.OffsetMetadataAndError;
import kafka.common.TopicAndPartition;
import kafka.javaapi.FetchResponse;
import kafka.javaapi.OffsetCommitRequest;
import kafka.javaapi.OffsetCommitResponse;
import kafka.javaapi.OffsetFetchRequest;
import kafka.javaapi.OffsetFetchResponse;
import kafka.javaapi.OffsetRequest;
import kafka.javaapi.OffsetResponse;
import kafka.javaapi.TopicMetadata;
import kafka.javaapi.TopicMetadataRequest;
import kafka.javaapi.consumer.SimpleConsumer;
import kafka.message.MessageAndOffset;

public class ScalaSimpleConsumer {
    static final String CLIENT = "scala-0.8.2";

    static String hex(ByteBuffer data) {
        if (data == null) {
            return "-";
        }
        StringBuilder out = new StringBuilder();
        ByteBuffer view = data.duplicate();
        while (view.hasRemaining()) {
            out.append(String.format("%02x", view.get()));
        }
        return out.toString();
    }

    static void fail(String what) {
        System.out.flush();
        System.err.println("failed: " + what);
        System.exit(1);
    }

    public static void main(String[] args) {
        String[] hostPort = args[0].split(":");
        String group = args[1];
        boolean committed = args[3].equals("committed");
        short commitVersion = Short.parseShort(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]);
        Map<TopicAndPartition, Integer> want = new LinkedHashMap<>();
        List<String> topics = new ArrayList<>();
        for (String spec : args[2].split(",")) {
            String[] parts = spec.split(":");
            want.put(new TopicAndPartition(parts[0], Integer.parseInt(parts[1])), Integer.parseInt(parts[2]));
            if (!topics.contains(parts[0])) {
                topics.add(parts[0]);
            }
        }
        SimpleConsumer consumer = new SimpleConsumer(hostPort[0], Integer.parseInt(hostPort[1]), 30000,
                                                     1 << 20, CLIENT);
        try {
            for (TopicMetadata topic : consumer.send(new TopicMetadataRequest(topics)).topicsMetadata()) {
                if (topic.errorCode() != 0) {
                    fail("metadata of " + topic.topic() + ": error " + topic.errorCode());
                }
            }
            Map<TopicAndPartition, Long> position = new HashMap<>();
            if (committed) {
                OffsetFetchResponse found = consumer.fetchOffsets(new OffsetFetchRequest(
                        group, new ArrayList<>(want.keySet()), commitVersion, 1, CLIENT));
                for (Map.Entry<TopicAndPartition, OffsetMetadataAndError> e : found.offsets().entrySet()) {
                    if (e.getValue().error() != 0 || e.getValue().offset() < 0) {
                        fail("no committed offset for " + e.getKey() + ": error " + e.getValue().error());
                    }
                    position.put(e.getKey(), e.getValue().offset());
                }
            } else {
                Map<TopicAndPartition, PartitionOffsetRequestInfo> ask = new HashMap<>();
                for (TopicAndPartition tp : want.keySet()) {
                    ask.put(tp, new PartitionOffsetRequestInfo(kafka.api.OffsetRequest.EarliestTime(), 1));
                }
                OffsetResponse offsets = consumer.getOffsetsBefore(
                        new OffsetRequest(ask, kafka.api.OffsetRequest.CurrentVersion(), CLIENT));
                for (TopicAndPartition tp : want.keySet()) {
                    if (offsets.errorCode(tp.topic(), tp.partition()) != 0) {
                        fail("OffsetRequest for " + tp + ": error " + offsets.errorCode(tp.topic(), tp.partition()));
                    }
                    position.put(tp, offsets.offsets(tp.topic(), tp.partition())[0]);
                }
            }
            Map<TopicAndPartition, Integer> got = new HashMap<>();
            StringBuilder lines = new StringBuilder();
            while (true) {
                boolean done = true;
                FetchRequestBuilder request = new FetchRequestBuilder().clientId(CLIENT).maxWait(100).minBytes(1);
                for (Map.Entry<TopicAndPartition, Integer> e : want.entrySet()) {
                    if (got.getOrDefault(e.getKey(), 0) < e.getValue()) {
                        done = false;
                        request.addFetch(e.getKey().topic(), e.getKey().partition(), position.get(e.getKey()), 1 << 20);
                    }
                }
                if (done) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    System.out.print(lines);
                    System.err.println("timed out: " + got + " of " + want);
                    System.exit(2);
                }
                FetchResponse response = consumer.fetch(request.build());
                for (Map.Entry<TopicAndPartition, Integer> e : want.entrySet()) {
                    TopicAndPartition tp = e.getKey();
                    if (got.getOrDefault(tp, 0) >= e.getValue()) {
                        continue;
                    }
                    if (response.errorCode(tp.topic(), tp.partition()) != 0) {
                        fail("fetch of " + tp + ": error " + response.errorCode(tp.topic(), tp.partition()));
                    }
                    for (MessageAndOffset m : response.messageSet(tp.topic(), tp.partition())) {
                        if (m.offset() < position.get(tp) || got.getOrDefault(tp, 0) >= e.getValue()) {
                            continue;       // before the position (a compressed set), or beyond the count
                        }
                        lines.append(tp.topic()).append(' ').append(tp.partition()).append(' ')
                             .append(m.offset()).append(' ').append(hex(m.message().key())).append(' ')
                             .append(hex(m.message().payload())).append('\n');
                        got.merge(tp, 1, Integer::sum);
                        position.put(tp, m.nextOffset());
                    }
                }
            }
            Map<TopicAndPartition, OffsetAndMetadata> commit = new HashMap<>();
            for (Map.Entry<TopicAndPartition, Long> e : position.entrySet()) {
                commit.put(e.getKey(), new OffsetAndMetadata(e.getValue(), "", System.currentTimeMillis()));
            }
            OffsetCommitResponse answer = consumer.commitOffsets(
                    new OffsetCommitRequest(group, commit, 2, CLIENT, commitVersion));
            if (answer.hasError()) {
                fail("OffsetCommit v" + commitVersion + ": " + answer.errors());
            }
            System.out.print(lines);
            System.out.flush();
        } catch (Throwable e) {
            fail(e.getClass().getName() + ": " + e.getMessage());
        } finally {
            consumer.close();
        }
        System.exit(0);
    }
}
