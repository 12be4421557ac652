package dev.uatu.replication;

import java.io.Serializable;

/**
 * The source offsets one copy task reads: {@code [fromOffset, untilOffset)} of one partition,
 * as Spark's Kafka source planned them for a micro-batch. {@code topic} names the source topic
 * in a copy of many topics (it picks the range's {@link CopyConfig}); null in a copy of one.
 */
public final class SourceRange implements Serializable {
  private static final long serialVersionUID = 1L;

  final String topic;
  final int partition;
  final long fromOffset;
  final long untilOffset;

  public SourceRange(int partition, long fromOffset, long untilOffset) {
    this(null, partition, fromOffset, untilOffset);
  }

  public SourceRange(String topic, int partition, long fromOffset, long untilOffset) {
    if (fromOffset < 0 || untilOffset < fromOffset) {
      throw new IllegalArgumentException(
          "partition " + partition + ": bad offset range " + fromOffset + ".." + untilOffset);
    }
    this.topic = topic;
    this.partition = partition;
    this.fromOffset = fromOffset;
    this.untilOffset = untilOffset;
  }

  public String topic() {
    return topic;
  }

  public int partition() {
    return partition;
  }

  public long fromOffset() {
    return fromOffset;
  }

  public long untilOffset() {
    return untilOffset;
  }

  @Override
  public String toString() {
    return (topic == null ? "" : topic + "-") + partition + ":[" + fromOffset + ", " + untilOffset + ")";
  }
}
