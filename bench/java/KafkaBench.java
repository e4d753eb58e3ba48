// Kafka's own record code (kafka-clients, on the JVM) timed on the workload files that
// bench/bench_java.py writes, so both sides process the same bytes.  Plain Java: the Python
// driver asks for a warm-up, then alternates timed passes with its own.
//
// stdin, one command per line; stdout, one reply per line ("ok ..." or "err <message>"):
//   versions                         ok <key=value ...>  (Kafka, JDK and VM; down_conversion=
//                                    true when KafkaDownConvert is on the classpath)
//   warm <millis> <op> <args...>     ok <passes>   (JIT warm-up: passes for at least <millis> of
//                                    this thread's CPU time, then until 5 passes in a row bring no
//                                    new best (by 2%); at most 30 s)
//   run <op> <args...>               ok <wall ns> <thread CPU ns> <JVM CPU ns> <result> <checksum>
//                                    (one timed pass: System.nanoTime, this thread's CPU time
//                                    (ThreadMXBean) and the whole JVM's (that plus its other
//                                    threads' CPU time meanwhile: GC, JIT; -1 without /proc))
//   runcold <op> <args...>           the same after evicting the caches (untimed): one byte
//                                    written per 64-byte line of <EVICT_BYTES> of heap
//   quit
// ops (a pass covers the whole file; result counts what was processed):
//   crc <log>                        batches(), ensureValid() each       result: batches
//   shallow <log>                    batches(), header fields of each    result: batches
//   deep <log>                       as the consumer (check.crcs, ByteArrayDeserializer):
//                                    ensureValid(), streamingIterator(), offset, timestamp, key
//                                    and value copied to byte[]            result: records
//   build <records> <codec> <per-batch> [<out>]   MemoryRecordsBuilder v2 per batch into one
//                                    pooled buffer, as the producer      result: bytes built
//                                    (<out>: also write the batches there; a call not timed)
//   down <log> <magic>               MemoryRecords.downConvert (eager)    result: bytes out
//   lazy <log> <magic> <chunk>       LazyDownConversionRecords.iterator(chunk), every chunk
//                                                                         result: bytes out
//                                    (down, lazy: in KafkaDownConvert.java, compiled only
//                                    against kafka-clients < 4.0, which removed them; without it
//                                    they reply "err ... no down-conversion")
// <log> is a record-set file; <records> is [i32 count] then count x ([i32 klen][key][i32 vlen]
// [value]) (big-endian).

import java.io.BufferedInputStream;
import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.DefaultRecordBatch;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.ByteBufferOutputStream;
import org.apache.kafka.common.utils.CloseableIterator;
import org.apache.kafka.common.utils.Utils;

public class KafkaBench {
    static final long TIMESTAMP = 1_700_000_000_000L;
    // The producer's BufferPool recycles batch.size buffers; one pooled buffer large enough
    // for any batch here (16 x 1 KiB records exceed the default 16 KiB batch.size).
    static final int POOLED_BUFFER = 64 * 1024;

    static final Map<String, ByteBuffer> logs = new HashMap<>();
    static final Map<String, byte[][][]> recordFiles = new HashMap<>();
    static final ByteBuffer pooled = ByteBuffer.allocate(POOLED_BUFFER);
    static final BufferSupplier decompressionBuffers = BufferSupplier.create();
    static long checksum;  // every op folds what it read in here, so no pass is dead code
    // runcold: more than the L3 cache (bench_java.py's EVICT_BYTES, which evicts the same
    // amount of ordinary 4 KiB-page memory before our passes)
    static final int EVICT_BYTES = 64 << 20;
    static byte[] evictBuffer;

    static void evictCaches() {
        if (evictBuffer == null) {
            evictBuffer = new byte[EVICT_BYTES];
        }
        for (int i = 0; i < EVICT_BYTES; i += 64) {
            evictBuffer[i]++;
        }
    }

    static ByteBuffer log(String path) throws IOException {
        ByteBuffer buffer = logs.get(path);
        if (buffer == null) {
            buffer = ByteBuffer.wrap(Files.readAllBytes(Paths.get(path)));
            logs.put(path, buffer);
        }
        return buffer.duplicate();
    }

    static byte[][][] records(String path) throws IOException {
        byte[][][] kv = recordFiles.get(path);
        if (kv == null) {
            try (DataInputStream in = new DataInputStream(
                    new BufferedInputStream(new FileInputStream(path), 1 << 16))) {
                int n = in.readInt();
                kv = new byte[2][n][];
                for (int i = 0; i < n; i++) {
                    for (int part = 0; part < 2; part++) {
                        int len = in.readInt();
                        if (len >= 0) {
                            kv[part][i] = new byte[len];
                            in.readFully(kv[part][i]);
                        }
                    }
                }
            }
            recordFiles.put(path, kv);
        }
        return kv;
    }

    static long crc(String path) throws IOException {
        long n = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(log(path)).batches()) {
            batch.ensureValid();
            n++;
        }
        return n;
    }

    static long shallow(String path) throws IOException {
        long n = 0, acc = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(log(path)).batches()) {
            Integer count = batch.countOrNull();
            acc += batch.baseOffset() + batch.lastOffset() + batch.maxTimestamp()
                + batch.sizeInBytes() + batch.checksum() + batch.magic()
                + batch.compressionType().id + batch.timestampType().id
                + (count == null ? -1 : count);
            n++;
        }
        checksum += acc;
        return n;
    }

    static long deep(String path) throws IOException {
        long n = 0, acc = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(log(path)).batches()) {
            batch.ensureValid();  // the consumer's check.crcs=true (its default)
            try (CloseableIterator<Record> it = batch.streamingIterator(decompressionBuffers)) {
                while (it.hasNext()) {
                    Record record = it.next();
                    // CompletedFetch.parseRecord: ByteArrayDeserializer gets Utils.toNullableArray
                    byte[] key = Utils.toNullableArray(record.key());
                    byte[] value = Utils.toNullableArray(record.value());
                    acc += record.offset() + record.timestamp() + (key == null ? -1 : key.length);
                    if (value != null && value.length > 0) {
                        acc += value.length + value[value.length - 1];
                    }
                    n++;
                }
            }
        }
        checksum += acc;
        return n;
    }

    static long build(String path, String codec, int perBatch, String out) throws IOException {
        byte[][][] kv = records(path);
        byte[][] keys = kv[0], values = kv[1];
        Compression compression = Compression.of(CompressionType.forName(codec)).build();
        FileChannel sink = out == null ? null : FileChannel.open(Paths.get(out),
            StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING);
        long total = 0;
        try {
            for (int start = 0; start < keys.length; start += perBatch) {
                pooled.clear();
                MemoryRecordsBuilder builder = MemoryRecords.builder(pooled, RecordBatch.MAGIC_VALUE_V2,
                    compression, TimestampType.CREATE_TIME, start);
                int end = Math.min(keys.length, start + perBatch);
                for (int i = start; i < end; i++) {
                    builder.append(TIMESTAMP, keys[i], values[i]);
                }
                MemoryRecords batch = builder.build();
                total += batch.sizeInBytes();
                if (sink != null) {
                    ByteBuffer bytes = batch.buffer();
                    while (bytes.hasRemaining()) {
                        sink.write(bytes);
                    }
                }
            }
        } finally {
            if (sink != null) {
                sink.close();
            }
        }
        return total;
    }

    static final Map<String, byte[][]> sectionFiles = new HashMap<>();

    // The records section (what follows the 61-byte header) of each batch of an uncompressed
    // v2 log: the bytes Kafka's builder streams into its codec.
    static byte[][] sections(String path) throws IOException {
        byte[][] sections = sectionFiles.get(path);
        if (sections == null) {
            List<byte[]> found = new ArrayList<>();
            ByteBuffer all = log(path);
            int at = 0;
            for (MutableRecordBatch batch : MemoryRecords.readableRecords(log(path)).batches()) {
                byte[] section = new byte[batch.sizeInBytes() - DefaultRecordBatch.RECORD_BATCH_OVERHEAD];
                all.position(at + DefaultRecordBatch.RECORD_BATCH_OVERHEAD);
                all.get(section);
                at += batch.sizeInBytes();
                found.add(section);
            }
            sections = found.toArray(new byte[0][]);
            sectionFiles.put(path, sections);
        }
        return sections;
    }

    // The codec alone: each batch's records section through Kafka's compression stream
    // (Compression.wrapForOutput, as MemoryRecordsBuilder opens it) into the pooled buffer.
    static long codec(String path, String codec) throws IOException {
        Compression compression = Compression.of(CompressionType.forName(codec)).build();
        long total = 0;
        for (byte[] section : sections(path)) {
            pooled.clear();
            ByteBufferOutputStream sink = new ByteBufferOutputStream(pooled);
            OutputStream out = compression.wrapForOutput(sink, RecordBatch.MAGIC_VALUE_V2);
            out.write(section);
            out.close();
            total += sink.position();
        }
        return total;
    }

    // Down-conversion (the down and lazy ops), which kafka-clients 4.0 removed, lives in
    // KafkaDownConvert: bench_java.py compiles it only where those classes exist, so this class
    // names none of them.  Loaded once, by the versions command at start-up (no reflection in
    // a timed pass: a pass calls it through this interface).
    interface DownConversion {
        long down(String path, byte magic) throws IOException;
        long lazy(String path, byte magic, long chunk) throws IOException;
    }

    static DownConversion downConversion;

    static DownConversion downConversion() {
        if (downConversion == null) {
            try {
                downConversion = (DownConversion) Class.forName("KafkaDownConvert")
                    .getDeclaredConstructor().newInstance();
            } catch (ReflectiveOperationException e) {
                throw new UnsupportedOperationException("kafka-clients " + AppInfoParser.getVersion()
                    + " has no down-conversion (KafkaDownConvert not compiled: " + e + ")");
            }
        }
        return downConversion;
    }

    static boolean hasDownConversion() {
        try {
            downConversion();
            return true;
        } catch (UnsupportedOperationException e) {
            return false;
        }
    }

    static long pass(String[] cmd, int at) throws IOException {
        String op = cmd[at];
        switch (op) {
            case "crc": return crc(cmd[at + 1]);
            case "shallow": return shallow(cmd[at + 1]);
            case "deep": return deep(cmd[at + 1]);
            case "build": return build(cmd[at + 1], cmd[at + 2], Integer.parseInt(cmd[at + 3]),
                                       cmd.length > at + 4 ? cmd[at + 4] : null);
            case "codec": return codec(cmd[at + 1], cmd[at + 2]);
            case "down": return downConversion().down(cmd[at + 1], Byte.parseByte(cmd[at + 2]));
            case "lazy": return downConversion().lazy(cmd[at + 1], Byte.parseByte(cmd[at + 2]),
                                                     Long.parseLong(cmd[at + 3]));
            default: throw new IllegalArgumentException("unknown op " + op);
        }
    }

    // CPU time of this JVM's other threads (GC, JIT...) in nanoseconds: the sum of their
    // /proc/self/task/*/schedstat first fields (Linux; the MXBean's process CPU time counts in
    // 10 ms ticks, too coarse for one pass).  This thread is left out: its pass is timed by
    // ThreadMXBean, and reading these files is not part of it.  -1 where /proc is not there.
    static long otherThreadsCpuNanos() {
        long total = 0;
        try (java.nio.file.DirectoryStream<Path> tasks = Files.newDirectoryStream(Paths.get("/proc/self/task"))) {
            Path self = Paths.get("/proc/thread-self").toRealPath().getFileName();
            for (Path task : tasks) {
                if (task.getFileName().equals(self)) {
                    continue;
                }
                try {
                    String stat = new String(Files.readAllBytes(task.resolve("schedstat")));
                    total += Long.parseLong(stat.substring(0, stat.indexOf(' ')));
                } catch (IOException | RuntimeException gone) {
                    // a thread that ended meanwhile
                }
            }
        } catch (IOException | RuntimeException e) {
            return -1;
        }
        return total;
    }

    static String versions() {
        List<String> facts = new ArrayList<>();
        facts.add("kafka=" + AppInfoParser.getVersion());
        for (String key : new String[] {"java.version", "java.vm.name", "java.vm.version", "os.arch"}) {
            facts.add(key + "=" + System.getProperty(key).replace(' ', '_'));
        }
        facts.add("max_heap_mb=" + Runtime.getRuntime().maxMemory() / (1 << 20));
        facts.add("processors=" + Runtime.getRuntime().availableProcessors());
        facts.add("down_conversion=" + hasDownConversion());
        return String.join(" ", facts);
    }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        PrintStream out = new PrintStream(System.out, true);
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split(" ");
            try {
                switch (cmd[0]) {
                    case "quit":
                        return;
                    case "versions":
                        out.println("ok " + versions());
                        break;
                    case "warm": {
                        // CPU time, not wall time: on a loaded machine the JIT needs the passes
                        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
                        long cpuEnd = threads.getCurrentThreadCpuTime() + Long.parseLong(cmd[1]) * 1_000_000L;
                        long wallEnd = System.nanoTime() + 30_000_000_000L;
                        long best = Long.MAX_VALUE, sinceBest = 0, passes = 0;
                        while (true) {
                            long start = System.nanoTime();
                            pass(cmd, 2);
                            long elapsed = System.nanoTime() - start;
                            passes++;
                            if (elapsed < best - best / 50) {
                                best = elapsed;
                                sinceBest = 0;
                            } else {
                                sinceBest++;
                            }
                            if (threads.getCurrentThreadCpuTime() >= cpuEnd && sinceBest >= 5
                                    || System.nanoTime() > wallEnd) {
                                break;
                            }
                        }
                        out.println("ok " + passes);
                        break;
                    }
                    case "runcold":
                        evictCaches();
                        // fall through: the same timed pass
                    case "run": {
                        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
                        long othersStart = otherThreadsCpuNanos();
                        long cpuStart = threads.getCurrentThreadCpuTime();
                        long start = System.nanoTime();
                        long result = pass(cmd, 1);
                        long elapsed = System.nanoTime() - start;
                        long cpu = threads.getCurrentThreadCpuTime() - cpuStart;
                        long othersEnd = otherThreadsCpuNanos();
                        long jvm = othersStart < 0 || othersEnd < 0 ? -1 : cpu + othersEnd - othersStart;
                        out.println("ok " + elapsed + " " + cpu + " " + jvm + " " + result + " " + checksum);
                        break;
                    }
                    default:
                        out.println("err unknown command " + cmd[0]);
                }
            } catch (Exception e) {
                out.println("err " + e.toString().replace('\n', ' '));
            }
        }
    }
}
