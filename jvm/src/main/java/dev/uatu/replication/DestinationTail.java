package dev.uatu.replication;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads the tails of destination partitions to find which source records they already hold,
 * so a restarted or retried task sends nothing twice. Exactly one copy survives as long as
 * only this job writes the destination partition, in order.
 */
final class DestinationTail {
  private static final Duration TIMEOUT = Duration.ofSeconds(10);
  private static final Logger LOG = LoggerFactory.getLogger(DestinationTail.class);

  private DestinationTail() {}

  /** Highest offset of {@code sourcePartition} already in its destination partition, or -1. */
  static long replicatedUpTo(
      KafkaConsumer<byte[], byte[]> consumer, CopyConfig config, int sourcePartition) {
    return replicatedUpTo(consumer, List.of(config), List.of(sourcePartition))[0];
  }

  /**
   * For each {@code (configs[i], sourcePartitions[i])}, the highest offset of the source
   * partition already in its destination partition, or -1.
   *
   * <p>Reads each destination partition backwards in growing chunks (16, 64, 256, ... records)
   * until a record whose last {@link Provenance} stamp names its source partition appears, the
   * partition's start is reached, or {@code scanLimit} records were read. All partitions are
   * read together: one request for their offsets, then fetches that carry every partition still
   * being scanned, so a task of many partitions pays a few round trips, not a few per partition.
   * A destination partition that two source partitions write is scanned once per source.
   */
  static long[] replicatedUpTo(
      KafkaConsumer<byte[], byte[]> consumer,
      List<CopyConfig> configs,
      List<Integer> sourcePartitions) {
    int n = configs.size();
    long[] best = new long[n];
    Arrays.fill(best, -1);
    List<Integer> pending = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      pending.add(i);
    }
    while (!pending.isEmpty()) {
      // Each round scans distinct destination partitions; a repeated one waits for the next.
      Set<TopicPartition> seen = new HashSet<>();
      List<Integer> round = new ArrayList<>();
      List<Integer> later = new ArrayList<>();
      for (int i : pending) {
        (seen.add(destination(configs.get(i), sourcePartitions.get(i))) ? round : later).add(i);
      }
      scan(consumer, configs, sourcePartitions, round, best);
      pending = later;
    }
    return best;
  }

  private static TopicPartition destination(CopyConfig config, int sourcePartition) {
    int partition = config.destinationPartition(sourcePartition);
    return new TopicPartition(config.destinationTopic, partition);
  }

  /** The scan of {@code which}, whose destination partitions are distinct, into {@code best}. */
  private static void scan(
      KafkaConsumer<byte[], byte[]> consumer,
      List<CopyConfig> configs,
      List<Integer> sourcePartitions,
      List<Integer> which,
      long[] best) {
    Map<TopicPartition, Integer> index = new HashMap<>();
    Map<Integer, Provenance> ours = new HashMap<>();
    for (int i : which) {
      CopyConfig config = configs.get(i);
      int source = sourcePartitions.get(i);
      index.put(destination(config, source), i);
      ours.put(i, new Provenance(config.sourceCluster, config.sourceTopic, source));
    }
    Map<TopicPartition, Long> low = consumer.beginningOffsets(index.keySet(), TIMEOUT);
    Map<TopicPartition, Long> high = consumer.endOffsets(index.keySet(), TIMEOUT);
    Map<TopicPartition, Long> end = new HashMap<>(high);
    Map<TopicPartition, Long> chunk = new HashMap<>();
    Map<TopicPartition, Long> scanned = new HashMap<>();
    Set<TopicPartition> active = new HashSet<>();
    for (TopicPartition tp : index.keySet()) {
      chunk.put(tp, 16L);
      scanned.put(tp, 0L);
      if (end.get(tp) > low.get(tp)) {
        active.add(tp);
      }
    }
    while (!active.isEmpty()) {
      Map<TopicPartition, Long> starts = new HashMap<>();
      for (TopicPartition tp : active) {
        starts.put(tp, Math.max(low.get(tp), end.get(tp) - chunk.get(tp)));
      }
      consumer.assign(active);
      starts.forEach(consumer::seek);
      readChunks(consumer, starts, end, index, ours, best);
      Set<TopicPartition> next = new HashSet<>();
      for (TopicPartition tp : active) {
        int i = index.get(tp);
        long start = starts.get(tp);
        scanned.merge(tp, end.get(tp) - start, Long::sum);
        end.put(tp, start);
        chunk.put(tp, chunk.get(tp) * 4);
        if (best[i] < 0 && start > low.get(tp) && scanned.get(tp) < configs.get(i).scanLimit) {
          next.add(tp);
        }
      }
      active = next;
    }
    consumer.assign(List.of());
    for (Map.Entry<TopicPartition, Integer> e : index.entrySet()) {
      TopicPartition tp = e.getKey();
      found(tp, low.get(tp), high.get(tp), scanned.get(tp), best[e.getValue()], index.size());
    }
  }

  /** Reads each assigned partition from its start to {@code end}, keeping the best stamp. */
  private static void readChunks(
      KafkaConsumer<byte[], byte[]> consumer,
      Map<TopicPartition, Long> starts,
      Map<TopicPartition, Long> end,
      Map<TopicPartition, Integer> index,
      Map<Integer, Provenance> ours,
      long[] best) {
    Set<TopicPartition> reading = new HashSet<>(starts.keySet());
    long deadline = System.nanoTime() + TIMEOUT.toNanos();
    while (!reading.isEmpty()) {
      if (System.nanoTime() > deadline) {
        TopicPartition tp = reading.iterator().next();
        throw new ReplicationWriteException(
            "reading " + tp + " offsets " + starts.get(tp) + ".." + end.get(tp)
                + " took longer than " + TIMEOUT
                + (reading.size() > 1 ? " (and " + (reading.size() - 1) + " more)" : ""));
      }
      ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(200));
      for (TopicPartition tp : polled.partitions()) {
        int i = index.get(tp);
        for (ConsumerRecord<byte[], byte[]> record : polled.records(tp)) {
          if (record.offset() < end.get(tp)) {
            best[i] = Math.max(best[i], ours.get(i).offsetIn(record.headers()));
          }
        }
      }
      Set<TopicPartition> done = new HashSet<>();
      for (TopicPartition tp : reading) {
        if (consumer.position(tp) >= end.get(tp)) {
          done.add(tp);
        }
      }
      reading.removeAll(done);
      consumer.pause(done); // the next fetches carry the partitions still being read
    }
    consumer.resume(consumer.paused());
  }

  // One line per partition: what a restart skips rests on it (a fresh-clone run once re-sent a
  // whole partition after a SIGKILL, as if this had returned -1; docs/replication.md). At
  // DEBUG when a task scans many partitions, except for a tail that holds none of its source:
  // a restart sends that partition's range whole.
  private static void found(
      TopicPartition tp, long low, long high, long scanned, long best, int partitions) {
    boolean plain = partitions <= 8 || (best < 0 && high > low);
    if (plain || LOG.isDebugEnabled()) {
      String line = "tail of {} (offsets {}..{}, {} read): holds source offsets up to {}";
      if (plain) {
        LOG.info(line, tp, low, high, scanned, best);
      } else {
        LOG.debug(line, tp, low, high, scanned, best);
      }
    }
  }
}
