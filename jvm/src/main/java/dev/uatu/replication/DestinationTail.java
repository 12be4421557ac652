package dev.uatu.replication;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;

/**
 * Reads the tail of a destination partition to find which source records it already holds,
 * so a restarted or retried task sends nothing twice. Exactly one copy survives as long as
 * only this job writes the destination partition, in order.
 */
final class DestinationTail {
  static final String STAMP_CLUSTER = "uatu.src.cluster";
  static final String STAMP_TOPIC = "uatu.src.topic";
  static final String STAMP_PARTITION = "uatu.src.partition";
  static final String STAMP_OFFSET = "uatu.src.offset";

  private static final Duration TIMEOUT = Duration.ofSeconds(10);

  private DestinationTail() {}

  /**
   * Highest offset of {@code sourcePartition} already in its destination partition, or -1.
   *
   * <p>Reads the destination partition backwards in growing chunks (16, 64, 256, ... records)
   * until a record stamped with this source partition appears, the partition's start is
   * reached, or {@code scanLimit} records were read. The last stamp of a name wins: a record
   * copied twice (A to B to C) carries both hops, the later one last.
   */
  static long replicatedUpTo(
      KafkaConsumer<byte[], byte[]> consumer, CopyConfig config, int sourcePartition) {
    TopicPartition tp =
        new TopicPartition(config.destinationTopic, config.destinationPartition(sourcePartition));
    List<TopicPartition> only = List.of(tp);
    long low = consumer.beginningOffsets(only, TIMEOUT).get(tp);
    long high = consumer.endOffsets(only, TIMEOUT).get(tp);
    String partition = Integer.toString(sourcePartition);
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
          if (record.offset() < end && isFrom(record, config, partition)) {
            best = Math.max(best, stampedOffset(record));
          }
        }
      }
      if (best >= 0) {
        return best;
      }
      scanned += end - start;
      end = start;
      chunk *= 4;
    }
    return -1;
  }

  private static boolean isFrom(ConsumerRecord<byte[], byte[]> record, CopyConfig config, String p) {
    return config.sourceCluster.equals(last(record, STAMP_CLUSTER))
        && config.sourceTopic.equals(last(record, STAMP_TOPIC))
        && p.equals(last(record, STAMP_PARTITION))
        && last(record, STAMP_OFFSET) != null;
  }

  private static long stampedOffset(ConsumerRecord<byte[], byte[]> record) {
    return Long.parseLong(last(record, STAMP_OFFSET));
  }

  private static String last(ConsumerRecord<byte[], byte[]> record, String name) {
    Header header = record.headers().lastHeader(name);
    if (header == null || header.value() == null) {
      return null;
    }
    return new String(header.value(), StandardCharsets.UTF_8);
  }
}
