package dev.uatu.replication;

import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads the tail of a destination partition to find which source records it already holds,
 * so a restarted or retried task sends nothing twice. Exactly one copy survives as long as
 * only this job writes the destination partition, in order.
 */
final class DestinationTail {
  private static final Duration TIMEOUT = Duration.ofSeconds(10);
  private static final Logger LOG = LoggerFactory.getLogger(DestinationTail.class);

  private DestinationTail() {}

  /**
   * Highest offset of {@code sourcePartition} already in its destination partition, or -1.
   *
   * <p>Reads the destination partition backwards in growing chunks (16, 64, 256, ... records)
   * until a record whose last {@link Provenance} stamp names this source partition appears,
   * the partition's start is reached, or {@code scanLimit} records were read.
   */
  static long replicatedUpTo(
      KafkaConsumer<byte[], byte[]> consumer, CopyConfig config, int sourcePartition) {
    TopicPartition tp =
        new TopicPartition(config.destinationTopic, config.destinationPartition(sourcePartition));
    List<TopicPartition> only = List.of(tp);
    long low = consumer.beginningOffsets(only, TIMEOUT).get(tp);
    long high = consumer.endOffsets(only, TIMEOUT).get(tp);
    Provenance ours = new Provenance(config.sourceCluster, config.sourceTopic, sourcePartition);
    long end = high;
    long chunk = 16;
    long scanned = 0;
    consumer.assign(only);
    while (end > low && scanned < config.scanLimit) {
      long start = Math.max(low, end - chunk);
      long best = -1;
      consumer.seek(tp, start);
      long deadline = System.nanoTime() + TIMEOUT.toNanos();
      while (consumer.position(tp) < end) {
        if (System.nanoTime() > deadline) {
          throw new ReplicationWriteException(
              "reading " + tp + " offsets " + start + ".." + end + " took longer than " + TIMEOUT);
        }
        for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
          if (record.offset() < end) {
            best = Math.max(best, ours.offsetIn(record.headers()));
          }
        }
      }
      scanned += end - start;
      if (best >= 0) {
        return found(tp, low, high, scanned, best);
      }
      end = start;
      chunk *= 4;
    }
    return found(tp, low, high, scanned, -1);
  }

  // One line per scan: what a restart skips rests on it (a fresh-clone run once re-sent a
  // whole partition after a SIGKILL, as if this had returned -1; docs/replication.md).
  private static long found(TopicPartition tp, long low, long high, long scanned, long best) {
    LOG.info(
        "tail of {} (offsets {}..{}, {} read): holds source offsets up to {}",
        tp, low, high, scanned, best);
    return best;
  }
}
