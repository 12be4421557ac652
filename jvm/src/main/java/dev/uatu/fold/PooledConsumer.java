package dev.uatu.fold;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * A pooled byte-array consumer ({@link Consumers}) reading a set of partitions, with the
 * records it fetched past the end of the ranges it read last. A poll returns whole fetches, so
 * the read of a range ends with records of the next one in hand; they are kept here, per
 * partition, with the time they were fetched, for the task that reads the next range of the
 * partition, which then needs no seek and no fetch before its first record. One fetch carries
 * every partition still being read, so a task that reads many small ranges pays one round trip
 * for all of them, not one per partition. Not thread-safe: a task borrows it.
 */
public final class PooledConsumer {
  final KafkaConsumer<byte[], byte[]> consumer;
  private Set<TopicPartition> assigned = Set.of();
  private final Map<TopicPartition, Fetched> ahead = new HashMap<>(); // fetched, not handed out

  /** Records of one partition, in offset order, and when their poll came back (epoch us). */
  public record Fetched(
      TopicPartition tp, List<ConsumerRecord<byte[], byte[]>> records, long fetchedMicros) {}

  PooledConsumer(KafkaConsumer<byte[], byte[]> consumer) {
    this.consumer = consumer;
  }

  /** Whether the next record this consumer hands out of {@code tp} is {@code offset}. */
  boolean isAt(TopicPartition tp, long offset) {
    if (!assigned.contains(tp)) {
      return false;
    }
    try {
      return position(tp) == offset;
    } catch (RuntimeException e) {
      return false; // whatever it is, a seek sets it right
    }
  }

  /** How many of {@code starts}' partitions this consumer would read without a seek. */
  int readyFor(Map<TopicPartition, Long> starts) {
    int ready = 0;
    for (Map.Entry<TopicPartition, Long> e : starts.entrySet()) {
      if (isAt(e.getKey(), e.getValue())) {
        ready++;
      }
    }
    return ready;
  }

  /**
   * Reads exactly {@code starts}' partitions from now on, each from its offset: a partition
   * already there keeps what was fetched of it, the others are sought (and lose it).
   */
  void moveTo(Map<TopicPartition, Long> starts) {
    if (!assigned.equals(starts.keySet())) {
      consumer.assign(starts.keySet()); // kept partitions keep their positions
      assigned = Set.copyOf(starts.keySet());
      ahead.keySet().retainAll(assigned);
    }
    consumer.resume(consumer.paused());
    for (Map.Entry<TopicPartition, Long> e : starts.entrySet()) {
      if (!isAt(e.getKey(), e.getValue())) {
        consumer.seek(e.getKey(), e.getValue());
        ahead.remove(e.getKey());
      }
    }
  }

  /** The next offset of {@code tp} this consumer hands out (or a position past markers). */
  long position(TopicPartition tp) {
    Fetched kept = ahead.get(tp);
    return kept != null ? kept.records.get(0).offset() : consumer.position(tp);
  }

  /**
   * The next records of the partitions in {@code reading}: those fetched before, if any of
   * them has some; else one poll's (possibly none, after {@code poll}), which fetches nothing
   * of the other assigned partitions (they are paused: their reads are done).
   */
  List<Fetched> next(Duration poll, Set<TopicPartition> reading) {
    List<Fetched> out = new ArrayList<>();
    for (TopicPartition tp : reading) {
      Fetched kept = ahead.remove(tp);
      if (kept != null) {
        out.add(kept);
      }
    }
    if (!out.isEmpty()) {
      return out;
    }
    Set<TopicPartition> done = new HashSet<>(assigned);
    done.removeAll(reading);
    done.removeAll(consumer.paused());
    if (!done.isEmpty()) {
      consumer.pause(done);
    }
    ConsumerRecords<byte[], byte[]> polled = consumer.poll(poll);
    long fetched = MicroClock.nowMicros();
    for (TopicPartition tp : polled.partitions()) {
      out.add(new Fetched(tp, polled.records(tp), fetched));
    }
    return out;
  }

  /** Keep {@code records[from:]} of {@code fetched}'s partition for the next read of it. */
  void keep(Fetched fetched, int from) {
    List<ConsumerRecord<byte[], byte[]>> rest =
        fetched.records.subList(from, fetched.records.size());
    if (rest.isEmpty()) {
      return;
    }
    if (ahead.containsKey(fetched.tp)) {
      throw new FoldException("records of " + fetched.tp + " fetched twice past a read's end");
    }
    ahead.put(fetched.tp, new Fetched(fetched.tp, rest, fetched.fetchedMicros));
  }

  /** Forget the partitions and what was fetched of them (a read that failed). */
  void reset() {
    consumer.unsubscribe();
    assigned = Set.of();
    ahead.clear();
  }
}
