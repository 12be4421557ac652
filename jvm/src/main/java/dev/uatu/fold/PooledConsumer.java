package dev.uatu.fold;

import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * A pooled byte-array consumer ({@link Consumers}) reading one partition, with the records it
 * fetched past the end of the last range it read. A poll returns whole fetches, so the read of
 * a range ends with records of the next one in hand; they are kept here, with the time they
 * were fetched, for the task that reads the next range of the partition, which then needs no
 * seek and no fetch before its first record. Not thread-safe: a task borrows it.
 */
public final class PooledConsumer {
  final KafkaConsumer<byte[], byte[]> consumer;
  private TopicPartition tp; // null until assigned
  private List<ConsumerRecord<byte[], byte[]>> ahead = List.of(); // fetched, not handed out
  private int next; // index of the first record of `ahead` not handed out
  private long aheadFetchedMicros;

  PooledConsumer(KafkaConsumer<byte[], byte[]> consumer) {
    this.consumer = consumer;
  }

  /** Whether the next record this consumer hands out is {@code offset} of {@code tp}. */
  boolean isAt(TopicPartition tp, long offset) {
    if (!tp.equals(this.tp)) {
      return false;
    }
    try {
      return position() == offset;
    } catch (RuntimeException e) {
      return false; // whatever it is, a seek sets it right
    }
  }

  /** Read {@code tp} from {@code offset} on, dropping what was fetched before. */
  void seek(TopicPartition tp, long offset) {
    consumer.assign(List.of(tp));
    consumer.seek(tp, offset);
    this.tp = tp;
    ahead = List.of();
    next = 0;
  }

  /** The offset of the next record this consumer hands out (or a position past markers). */
  long position() {
    return next < ahead.size() ? ahead.get(next).offset() : consumer.position(tp);
  }

  /**
   * The next records of the partition, in offset order: the ones fetched before, if any, else
   * one poll's (possibly none, after {@code poll}); {@link #fetchedMicros} says when they came.
   */
  List<ConsumerRecord<byte[], byte[]>> nextRecords(Duration poll) {
    if (next < ahead.size()) {
      List<ConsumerRecord<byte[], byte[]>> kept = ahead.subList(next, ahead.size());
      ahead = List.of();
      next = 0;
      return kept;
    }
    List<ConsumerRecord<byte[], byte[]>> records = consumer.poll(poll).records(tp);
    aheadFetchedMicros = MicroClock.nowMicros();
    return records;
  }

  /** When the records {@link #nextRecords} returned last were fetched (epoch microseconds). */
  long fetchedMicros() {
    return aheadFetchedMicros;
  }

  /** Keep {@code records[from:]} (fetched at {@link #fetchedMicros}) for the next read. */
  void keep(List<ConsumerRecord<byte[], byte[]>> records, int from) {
    ahead = records;
    next = from;
  }

  /** Forget the partition and what was fetched of it (a read that failed). */
  void reset() {
    consumer.unsubscribe();
    tp = null;
    ahead = List.of();
    next = 0;
  }
}
