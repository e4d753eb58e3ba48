// Kafka's own consumer (org.apache.kafka:kafka-clients) reading from a broker, for
// tests/test_serve_java.py and tests/test_kafka_broker.py: by assign (every partition from
// offset 0) or through a consumer group (subscribe, commitSync at the end).  It compiles and
// runs with kafka-clients 0.9 to 4.x (poll and seekToBeginning are called by reflection:
// poll(Duration) came in 2.0, poll(long) went in 4.0; seekToBeginning took varargs before 0.10).
//
// args: BOOTSTRAP GROUP|- ISOLATION TOPIC:PARTITION:COUNT[,...] TIMEOUT_MS [PROPERTIES_FILE]
// PROPERTIES_FILE: more client settings (security.protocol, sasl.*, ssl.*...), read with
// java.util.Properties; they override the defaults below.
// stdout: one line per record, "topic partition offset key value" (key and value in hex, "-"
// for null); exit 0 once COUNT records of every partition were read, 2 on timeout (stderr:
// "timed out: " what was read), 1 with the client's exception (stderr: "failed: " its class
// and message, then the stack trace).

import java.io.FileInputStream;
import java.io.InputStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ServeConsumer {
    static String hex(byte[] data) {
        if (data == null) {
            return "-";
        }
        StringBuilder out = new StringBuilder(data.length * 2);
        for (byte b : data) {
            out.append(String.format("%02x", b));
        }
        return out.length() == 0 ? "" : out.toString();
    }

    // consumer.poll(200 ms) on any client version
    @SuppressWarnings("unchecked")
    static ConsumerRecords<byte[], byte[]> poll(KafkaConsumer<byte[], byte[]> consumer, Method poll)
            throws Throwable {
        try {
            return (ConsumerRecords<byte[], byte[]>) poll.invoke(consumer,
                    poll.getParameterTypes()[0] == long.class ? (Object) 200L : Duration.ofMillis(200));
        } catch (InvocationTargetException e) {
            throw e.getCause();            // what the client raised (an Error too: OutOfMemoryError...)
        }
    }

    static Method pollMethod() throws NoSuchMethodException {
        try {
            return KafkaConsumer.class.getMethod("poll", Duration.class);
        } catch (NoSuchMethodException e) {
            return KafkaConsumer.class.getMethod("poll", long.class);
        }
    }

    // consumer.seekToBeginning(partitions) on any client version
    static void seekToBeginning(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> partitions)
            throws Throwable {
        for (Method m : KafkaConsumer.class.getMethods()) {
            if (m.getName().equals("seekToBeginning") && m.getParameterTypes().length == 1) {
                Object arg = m.getParameterTypes()[0].isArray()
                        ? partitions.toArray(new TopicPartition[0]) : partitions;
                try {
                    m.invoke(consumer, arg);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
                return;
            }
        }
        throw new NoSuchMethodException("KafkaConsumer.seekToBeginning");
    }

    public static void main(String[] args) {
        try {
            consume(args);
        } catch (Throwable e) {
            System.out.flush();
            System.err.println("failed: " + e.getClass().getName() + ": " + e.getMessage());
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void consume(String[] args) throws Throwable {
        String bootstrap = args[0];
        String group = args[1];
        String isolation = args[2];
        long timeoutMs = Long.parseLong(args[4]);
        Map<TopicPartition, Integer> want = new HashMap<>();
        Set<String> topics = new HashSet<>();
        for (String spec : args[3].split(",")) {
            String[] parts = spec.split(":");
            want.put(new TopicPartition(parts[0], Integer.parseInt(parts[1])), Integer.parseInt(parts[2]));
            topics.add(parts[0]);
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("isolation.level", isolation);
        props.put("fetch.max.wait.ms", "100");
        if (!group.equals("-")) {
            props.put("group.id", group);
        }
        if (args.length > 5) {
            try (InputStream in = new FileInputStream(args[5])) {
                props.load(in);
            }
        }
        Method poll = pollMethod();
        Map<TopicPartition, Integer> got = new HashMap<>();
        StringBuilder lines = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            if (group.equals("-")) {
                List<TopicPartition> assigned = new ArrayList<>(want.keySet());
                consumer.assign(assigned);
                seekToBeginning(consumer, assigned);
            } else {
                consumer.subscribe(new ArrayList<>(topics));    // a List: 0.9 takes no other
            }
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (Map.Entry<TopicPartition, Integer> entry : want.entrySet()) {
                    if (got.getOrDefault(entry.getKey(), 0) < entry.getValue()) {
                        done = false;
                    }
                }
                if (done) {
                    if (!group.equals("-")) {
                        consumer.commitSync();
                    }
                    System.out.print(lines);
                    System.out.flush();
                    return;
                }
                ConsumerRecords<byte[], byte[]> records = poll(consumer, poll);
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    got.merge(tp, 1, Integer::sum);
                    lines.append(r.topic()).append(' ').append(r.partition()).append(' ').append(r.offset())
                         .append(' ').append(hex(r.key())).append(' ').append(hex(r.value())).append('\n');
                }
            }
        }
        System.out.print(lines);
        System.err.println("timed out: " + got + " of " + want);
        System.exit(2);
    }
}
