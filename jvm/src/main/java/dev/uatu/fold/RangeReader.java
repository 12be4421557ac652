package dev.uatu.fold;

import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * Reads one offset range with a byte-array consumer and hands each record to a fold. The range
 * was planned by Spark from offsets the broker reported, so its records exist; positions past
 * transaction markers and aborted records (read_committed) count as read.
 */
public final class RangeReader {
  private static final Duration POLL = Duration.ofMillis(200);

  private RangeReader() {}

  /**
   * Feeds {@code fold} every record of {@code range} in offset order; returns how many and how
   * long the first one took to come (a slow first fetch shows apart from a slow fold). Fails
   * with {@link FoldException} when no record comes for {@code timeoutMs} before the range's
   * end (a broker that stopped answering fails the task instead of stalling the batch).
   */
  public static Read read(
      KafkaConsumer<byte[], byte[]> consumer, FoldRange range, RecordFold fold, long timeoutMs) {
    TopicPartition tp = new TopicPartition(range.topic, range.partition);
    consumer.assign(List.of(tp));
    consumer.seek(tp, range.fromOffset);
    long read = 0;
    long started = System.nanoTime();
    long firstRecordNanos = -1;
    long quietSince = started;
    while (consumer.position(tp) < range.untilOffset) {
      List<ConsumerRecord<byte[], byte[]>> records = consumer.poll(POLL).records(tp);
      long fetched = MicroClock.nowMicros();
      if (records.isEmpty()) {
        if (System.nanoTime() - quietSince > timeoutMs * 1_000_000L) {
          throw new FoldException(
              "no record of " + tp + " came in " + timeoutMs + " ms at offset "
                  + consumer.position(tp) + " (the range ends at " + range.untilOffset + ")");
        }
        continue;
      }
      quietSince = System.nanoTime();
      if (firstRecordNanos < 0) {
        firstRecordNanos = quietSince - started;
      }
      for (ConsumerRecord<byte[], byte[]> record : records) {
        if (record.offset() >= range.untilOffset) {
          break; // the next batch's
        }
        fold.add(record, fetched);
        read++;
      }
    }
    return new Read(read, Math.max(0, firstRecordNanos) / 1_000_000);
  }

  /** What {@link #read} read: records, and milliseconds from the seek to the first record. */
  public record Read(long records, long firstRecordMs) {}
}
