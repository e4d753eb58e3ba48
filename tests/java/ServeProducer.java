// Kafka's own producer (org.apache.kafka:kafka-clients 0.9 to 4.x) writing records to one
// partition, for tests/test_serve_produce.py: the old producers Kafka 4 turns away, through
// `serve --upstream --produce`.
//
// args: BOOTSTRAP TOPIC PARTITION COUNT COMPRESSION MAX_BLOCK_MS
// Record i: key "key-i" (null when i % 9 == 4), value "value i " repeated 1 + i % 5 times.
// stdout: "sent COUNT" once every send was acknowledged (acks=all, one in flight: in order);
// exit 1 with the client's exception (stderr: "failed: " its class and message).

import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ServeProducer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("compression.type", args[4]);
        props.put("acks", "all");
        props.put("max.in.flight.requests.per.connection", "1");
        props.put("linger.ms", "5");
        props.put("max.block.ms", args[5]);
        props.put("request.timeout.ms", "10000");
        props.put("retries", "3");
        String topic = args[1];
        int partition = Integer.parseInt(args[2]);
        int count = Integer.parseInt(args[3]);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props,
                new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < count; i++) {
                byte[] key = i % 9 == 4 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
                StringBuilder value = new StringBuilder();
                for (int r = 0; r < 1 + i % 5; r++) {
                    value.append("value ").append(i).append(' ');
                }
                producer.send(new ProducerRecord<>(topic, partition, key,
                    value.toString().getBytes(StandardCharsets.UTF_8))).get();
            }
            producer.flush();
            System.out.println("sent " + count);
        } catch (Exception failure) {
            Throwable cause = failure.getCause() != null ? failure.getCause() : failure;
            System.err.println("failed: " + cause.getClass().getName() + ": " + cause.getMessage());
            System.exit(1);
        }
    }
}
