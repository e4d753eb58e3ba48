// Kafka 3.9's own append path for a produce request's message set, up-converted to a v2 log
// (kafka-storage's LogValidator with toMagic 2, after UnifiedLog.analyzeAndValidateRecords'
// checksum and source-codec pass), for tests/test_upconvert.py and bench/bench_upconvert.py.
//
// stdin: requests [i64 now][i64 base offset][i8 timestamp type][i8 target codec, -1 producer]
//   [i8 compacted][i64 before max ms][i64 after max ms][i32 repeat][i32 length][message set]
// stdout: [i32 status][i32 length][payload]: status 0 = the validated records (payload) and,
// before them, [i64 thread CPU ns for `repeat` runs]; 1 = refused (payload: [i16 Kafka error
// code][the exception's class and message]).

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.function.Supplier;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.PrimitiveRef;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.common.MetadataVersion;
import org.apache.kafka.storage.internals.log.AppendOrigin;
import org.apache.kafka.storage.internals.log.LogValidator;
import org.apache.kafka.storage.internals.log.RecordValidationException;

public class UpConvertOracle {
    static final LogValidator.MetricsRecorder METRICS = new LogValidator.MetricsRecorder() {
        public void recordInvalidMagic() { }
        public void recordInvalidOffset() { }
        public void recordInvalidSequence() { }
        public void recordInvalidChecksums() { }
        public void recordNoKeyCompactedTopic() { }
    };

    static Time clock(long now) {
        return new Time() {
            public long milliseconds() { return now; }
            public long nanoseconds() { return System.nanoTime(); }
            public void sleep(long ms) { }
            public void waitObject(Object o, Supplier<Boolean> done, long deadline) { }
        };
    }

    static MemoryRecords append(byte[] set, long now, long base, int tsType, int target,
                                boolean compacted, long before, long after) {
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(set));
        CompressionType source = CompressionType.NONE;
        for (MutableRecordBatch batch : records.batches()) {   // analyzeAndValidateRecords
            batch.ensureValid();
            if (batch.compressionType() != CompressionType.NONE) source = batch.compressionType();
        }
        Compression targetCompression = Compression.of(
            target < 0 ? source : CompressionType.forId(target)).build();
        LogValidator validator = new LogValidator(records, new TopicPartition("t", 0), clock(now),
            source, targetCompression, compacted, RecordBatch.MAGIC_VALUE_V2,
            tsType == 1 ? TimestampType.LOG_APPEND_TIME : TimestampType.CREATE_TIME, before, after,
            RecordBatch.NO_PARTITION_LEADER_EPOCH, AppendOrigin.CLIENT, MetadataVersion.latestProduction());
        return validator.validateMessagesAndAssignOffsets(PrimitiveRef.ofLong(base), METRICS,
            BufferSupplier.create()).validatedRecords;
    }

    public static void main(String[] args) throws Exception {
        DataInputStream in = new DataInputStream(System.in);
        DataOutputStream out = new DataOutputStream(System.out);
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        while (true) {
            long now;
            try {
                now = in.readLong();
            } catch (EOFException end) {
                break;
            }
            long base = in.readLong();
            int tsType = in.readByte();
            int target = in.readByte();
            boolean compacted = in.readByte() != 0;
            long before = in.readLong();
            long after = in.readLong();
            int repeat = in.readInt();
            byte[] set = new byte[in.readInt()];
            in.readFully(set);
            try {
                MemoryRecords result = null;
                long cpu = threads.getCurrentThreadCpuTime();
                for (int i = 0; i < Math.max(1, repeat); i++)
                    result = append(set, now, base, tsType, target, compacted, before, after);
                cpu = threads.getCurrentThreadCpuTime() - cpu;
                ByteBuffer buffer = result.buffer();
                byte[] bytes = new byte[buffer.remaining()];
                buffer.duplicate().get(bytes);
                out.writeInt(0);
                out.writeInt(8 + bytes.length);
                out.writeLong(cpu);
                out.write(bytes);
            } catch (Exception caught) {
                // KafkaApis answers a RecordValidationException with its inner exception's code
                Exception refused = caught instanceof RecordValidationException
                    ? ((RecordValidationException) caught).invalidException() : caught;
                byte[] text = (refused.getClass().getSimpleName() + ": " + refused.getMessage())
                    .getBytes(StandardCharsets.UTF_8);
                out.writeInt(1);
                out.writeInt(2 + text.length);
                out.writeShort(Errors.forException(refused).code());
                out.write(text);
            }
            out.flush();
        }
    }
}
