package dev.uatu.fold;

import java.io.Serializable;

/**
 * The offsets one fold task reads: {@code [fromOffset, untilOffset)} of one topic partition,
 * as Spark's Kafka source planned them for a micro-batch ({@link RangeFolds#planned}).
 */
public final class FoldRange implements Serializable {
  private static final long serialVersionUID = 1L;

  final String topic;
  final int partition;
  final long fromOffset;
  final long untilOffset;

  public FoldRange(String topic, int partition, long fromOffset, long untilOffset) {
    if (fromOffset < 0 || untilOffset < fromOffset) {
      throw new IllegalArgumentException(
          topic + "-" + partition + ": bad offset range " + fromOffset + ".." + untilOffset);
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
    return topic + "-" + partition + ":[" + fromOffset + ", " + untilOffset + ")";
  }
}
