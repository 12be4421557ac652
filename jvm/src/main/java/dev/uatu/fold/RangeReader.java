package dev.uatu.fold;

import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Reads one offset range with a byte-array consumer and hands each record to a fold. The range
 * was planned by Spark from offsets the broker reported, so its records exist; positions past
 * transaction markers and aborted records (read_committed) count as read. A consumer already
 * at the range's start (it read the range before, {@link Consumers}) reads on without a seek,
 * first from the records it fetched then, and keeps what it fetches past the range's end.
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
      PooledConsumer consumer, FoldRange range, RecordFold fold, long timeoutMs) {
    TopicPartition tp = new TopicPartition(range.topic, range.partition);
    if (!consumer.isAt(tp, range.fromOffset)) {
      consumer.seek(tp, range.fromOffset);
    }
    long read = 0;
    long started = System.nanoTime();
    long firstRecordNanos = -1;
    long quietSince = started;
    while (consumer.position() < range.untilOffset) {
      List<ConsumerRecord<byte[], byte[]>> records = consumer.nextRecords(POLL);
      long fetched = consumer.fetchedMicros();
      if (records.isEmpty()) {
        if (System.nanoTime() - quietSince > timeoutMs * 1_000_000L) {
          throw new FoldException(
              "no record of " + tp + " came in " + timeoutMs + " ms at offset "
                  + consumer.position() + " (the range ends at " + range.untilOffset + ")");
        }
        continue;
      }
      quietSince = System.nanoTime();
      if (firstRecordNanos < 0) {
        firstRecordNanos = quietSince - started;
      }
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<byte[], byte[]> record = records.get(i);
        if (record.offset() >= range.untilOffset) {
          consumer.keep(records, i); // the next batch's
          break;
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
