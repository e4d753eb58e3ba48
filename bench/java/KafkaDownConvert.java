// KafkaBench's down and lazy ops: Kafka's down-conversion, which kafka-clients 4.0 removed.
// bench/bench_java.py compiles this class only against a kafka-clients that still has it;
// KafkaBench loads it by name (KafkaBench.downConversion), so KafkaBench itself compiles
// against every version.

import java.io.IOException;
import java.util.Iterator;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.ConvertedRecords;
import org.apache.kafka.common.record.LazyDownConversionRecords;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.Records;
import org.apache.kafka.common.utils.Time;

public class KafkaDownConvert implements KafkaBench.DownConversion {
    @Override
    public long down(String path, byte magic) throws IOException {
        ConvertedRecords<MemoryRecords> converted =
            MemoryRecords.readableRecords(KafkaBench.log(path)).downConvert(magic, 0L, Time.SYSTEM);
        KafkaBench.checksum += converted.recordConversionStats().numRecordsConverted();
        return converted.records().sizeInBytes();
    }

    @Override
    public long lazy(String path, byte magic, long chunk) throws IOException {
        LazyDownConversionRecords lazy = new LazyDownConversionRecords(new TopicPartition("t", 0),
            MemoryRecords.readableRecords(KafkaBench.log(path)), magic, 0L, Time.SYSTEM);
        long total = 0;
        Iterator<ConvertedRecords<?>> it = lazy.iterator(chunk);
        while (it.hasNext()) {
            ConvertedRecords<?> converted = it.next();
            total += ((Records) converted.records()).sizeInBytes();
        }
        return total;
    }
}
