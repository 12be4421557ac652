package dev.uatu.fold;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Reads a task's offset ranges, one per partition, with one byte-array consumer and hands each
 * record to its range's fold. Every partition still being read is in each fetch, so a task of
 * many small ranges costs a few round trips, not one per range. The ranges were planned by
 * Spark from offsets the broker reported, so their records exist; positions past transaction
 * markers and aborted records (read_committed) count as read. A consumer already at a range's
 * start (it read the range before, {@link Consumers}) reads on without a seek, first from the
 * records it fetched then, and keeps what it fetches past each range's end.
 */
public final class RangeReader {
  private static final Duration POLL = Duration.ofMillis(200);

  private RangeReader() {}

  /**
   * Feeds {@code folds.get(i)} every record of {@code ranges.get(i)} in offset order; returns
   * how many records and how long the first one took to come (a slow first fetch shows apart
   * from a slow fold). Fails with {@link FoldException} when no record comes for {@code
   * timeoutMs} before every range's end (a broker that stopped answering fails the task instead
   * of stalling the batch), or when two ranges are of one partition.
   */
  public static Read read(
      PooledConsumer consumer, List<FoldRange> ranges, List<RecordFold> folds, long timeoutMs) {
    Map<TopicPartition, Long> starts = new LinkedHashMap<>();
    Map<TopicPartition, Integer> index = new HashMap<>();
    for (int i = 0; i < ranges.size(); i++) {
      FoldRange range = ranges.get(i);
      TopicPartition tp = new TopicPartition(range.topic, range.partition);
      if (index.put(tp, i) != null) {
        throw new FoldException("two ranges of " + tp + " in one task: " + ranges);
      }
      starts.put(tp, range.fromOffset);
    }
    consumer.moveTo(starts);
    Set<TopicPartition> reading = new HashSet<>();
    for (TopicPartition tp : starts.keySet()) {
      if (consumer.position(tp) < ranges.get(index.get(tp)).untilOffset) {
        reading.add(tp);
      }
    }
    long read = 0;
    long started = System.nanoTime();
    long firstRecordNanos = -1;
    long quietSince = started;
    while (!reading.isEmpty()) {
      boolean any = false;
      for (PooledConsumer.Fetched fetched : consumer.next(POLL, reading)) {
        Integer i = index.get(fetched.tp());
        if (i == null || !reading.contains(fetched.tp())) {
          consumer.keep(fetched, 0); // not this read's: the next one of the partition
          continue;
        }
        any |= !fetched.records().isEmpty();
        read += feed(fetched, ranges.get(i), folds.get(i), consumer);
      }
      reading.removeIf(tp -> consumer.position(tp) >= ranges.get(index.get(tp)).untilOffset);
      if (any) {
        quietSince = System.nanoTime();
        if (firstRecordNanos < 0) {
          firstRecordNanos = quietSince - started;
        }
      } else if (!reading.isEmpty() && System.nanoTime() - quietSince > timeoutMs * 1_000_000L) {
        throw new FoldException(silence(consumer, reading, ranges, index, timeoutMs));
      }
    }
    return new Read(read, Math.max(0, firstRecordNanos) / 1_000_000);
  }

  /** Folds the fetched records up to the range's end; keeps the rest. Returns how many. */
  private static long feed(
      PooledConsumer.Fetched fetched, FoldRange range, RecordFold fold, PooledConsumer consumer) {
    List<ConsumerRecord<byte[], byte[]>> records = fetched.records();
    for (int i = 0; i < records.size(); i++) {
      ConsumerRecord<byte[], byte[]> record = records.get(i);
      if (record.offset() >= range.untilOffset) {
        consumer.keep(fetched, i); // the next batch's
        return i;
      }
      fold.add(record, fetched.fetchedMicros());
    }
    return records.size();
  }

  private static String silence(
      PooledConsumer consumer,
      Set<TopicPartition> reading,
      List<FoldRange> ranges,
      Map<TopicPartition, Integer> index,
      long timeoutMs) {
    StringBuilder where = new StringBuilder();
    reading.stream()
        .sorted((a, b) -> a.toString().compareTo(b.toString()))
        .limit(5)
        .forEach(
            tp ->
                where.append(where.length() == 0 ? "" : ", ")
                    .append(tp).append(" at offset ").append(consumer.position(tp))
                    .append(" (the range ends at ")
                    .append(ranges.get(index.get(tp)).untilOffset).append(')'));
    if (reading.size() > 5) {
      where.append(" and ").append(reading.size() - 5).append(" more partitions");
    }
    return "no record came in " + timeoutMs + " ms of " + where;
  }

  /** What {@link #read} read: records, and milliseconds from the seek to the first record. */
  public record Read(long records, long firstRecordMs) {}
}
